"""An in-process SMTP listener on a free port, and messages built for it."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from typing import Any

import pytest

from inboxes.addresses import agent_address
from inboxes.models import InboundRaw, Message
from inboxes.services import inbound_parse
from inboxes.smtp import inbound_controller
from tests.conftest import Persona
from tests.webhooks.conftest import celery_worker, receiver, webhook_settings  # noqa: F401 (fixtures)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def start_listener(transactional_db: None) -> Iterator[Callable[..., int]]:
    """Start a listener (settings as they are now, or a rate limit given); returns its port."""
    controllers: list[Any] = []

    def start(*, per_minute: int | None = None) -> int:
        port = free_port()
        controller = inbound_controller("127.0.0.1", port, per_minute=per_minute)
        controller.start()
        controllers.append(controller)
        return port

    yield start
    for controller in controllers:
        controller.stop()


@pytest.fixture
def smtp_port(start_listener: Callable[..., int]) -> int:
    return start_listener()


def address_of(persona: Persona) -> str:
    return agent_address(persona.agent)


def mail(
    to: str,
    *,
    subject: str = "Meeting next week?",
    body: str = "Could we meet on Tuesday?\n",
    sender: str = "Ana Lopez <ana@example.com>",
    message_id: str | None = None,
    in_reply_to: str | None = None,
    **headers: str,
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    if message_id:
        message["Message-ID"] = f"<{message_id}>"
    if in_reply_to:
        message["In-Reply-To"] = f"<{in_reply_to}>"
        message["References"] = f"<{in_reply_to}>"
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(body)
    return message


def deliver_raw(raw: bytes, recipients: list[str], *, sender: str = "ana@example.com") -> list[Message]:
    """Store a message as the listener would (without the SMTP dialogue) and parse it."""
    row = InboundRaw.objects.create(
        raw=raw, envelope_from=sender, envelope_to=recipients, peer_ip="127.0.0.1"
    )
    return inbound_parse(row.pk)
