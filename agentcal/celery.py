"""The Celery app (worker and beat are started by `agentcal run`)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentcal.settings")

app = Celery("agentcal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
