"""`python manage.py inbound_smtp [--host H] [--port N]`: the SMTP listener for agents' inboxes."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from inboxes.smtp import inbound_controller


class Command(BaseCommand):
    help = "Receive mail for agents' inboxes over SMTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.INBOUND_SMTP_HOST)
        parser.add_argument("--port", type=int, default=settings.INBOUND_SMTP_PORT)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        controller = inbound_controller(host, port)
        controller.start()
        self.stdout.write(f"listening on {host}:{port}")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        try:
            while not stop.wait(1.0):
                pass
        finally:
            controller.stop()
