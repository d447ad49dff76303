"""Helpers for the inbox tests: messages built for an agent's address, delivered with or without SMTP."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

from inboxes.addresses import agent_address
from inboxes.models import InboundRaw, Message
from inboxes.services import inbound_parse
from tests.helpers import Persona


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ListenerProcess:
    """`python manage.py inbound_smtp` running on the test database; its memory read from /proc."""

    port: int
    process: subprocess.Popen[bytes]

    def memory_kib(self, field: str = "VmRSS") -> int:
        """A line of /proc/<pid>/status: VmRSS (resident now) or VmHWM (the most resident so far)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0])
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")

    def spool_files(self) -> int:
        """Temporary files (unlinked, in the temporary folder) the listener has open: DATA spooled past its
        memory buffer."""
        links = [os.readlink(fd) for fd in Path(f"/proc/{self.process.pid}/fd").iterdir()]
        return sum(link.startswith(tempfile.gettempdir()) and link.endswith(" (deleted)") for link in links)

    def reset_peak_memory(self) -> None:
        """VmHWM starts again from VmRSS (proc(5): clear_refs, 5)."""
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")


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
