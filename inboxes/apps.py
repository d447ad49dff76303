from __future__ import annotations

from django.apps import AppConfig


class InboxesConfig(AppConfig):
    name = "inboxes"
    verbose_name = "Agent inboxes"
