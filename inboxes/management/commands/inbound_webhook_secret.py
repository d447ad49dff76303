"""`python manage.py inbound_webhook_secret <workspace slug> [--rotate]`: generate a workspace's
inbound-webhook signing secret and print it, once (the dashboard's mail settings do the same).

A secret that exists is never printed again: `--rotate` replaces it, and the old one stops working at
once.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inboxes.mail_settings import inbound_webhook_secret_issue
from workspaces.models import Workspace


class Command(BaseCommand):
    help = "Generate (or with --rotate, replace) a workspace's inbound-webhook secret and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("workspace", help="the workspace's slug")
        parser.add_argument(
            "--rotate", action="store_true", help="replace an existing secret (the old one stops working)"
        )

    def handle(self, *args: Any, workspace: str, rotate: bool, **options: Any) -> None:
        found = Workspace.objects.filter(slug=workspace).first()
        if found is None:
            raise CommandError(f"No workspace {workspace!r}.")
        if found.inbound_webhook_secret and not rotate:
            raise CommandError(
                f"{workspace} already has an inbound-webhook secret, and it is not shown again; "
                "--rotate replaces it (the old one stops working at once)."
            )
        secret = inbound_webhook_secret_issue(
            workspace=found, actor=None, by="manage.py inbound_webhook_secret"
        )
        self.stdout.write(secret)
