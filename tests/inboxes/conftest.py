"""An SMTP listener on a free port (in this process, or the management command in a process of its own),
and messages built for it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from inboxes.addresses import agent_address
from inboxes.models import InboundRaw, Message
from inboxes.services import inbound_parse
from inboxes.smtp import inbound_controller
from tests.conftest import Persona, test_database_url
from tests.webhooks.conftest import celery_worker, receiver, webhook_settings  # noqa: F401 (fixtures)

BASE_DIR = Path(__file__).resolve().parent.parent.parent


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


@pytest.fixture
def listener_process(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., ListenerProcess]]:
    """Start the management command with these settings (as environment variables)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(**settings: int | str) -> ListenerProcess:
        port = free_port()
        env = {
            **os.environ,
            **{name: str(value) for name, value in settings.items()},
            "DATABASE_URL": test_database_url(),
            "PYTHONUNBUFFERED": "1",
        }
        log = tmp_path / f"listener-{port}.log"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "inbound_smtp", "--host", "127.0.0.1", "--port", str(port)],
                cwd=BASE_DIR,
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        started.append(process)
        assert process.stdout is not None
        ready = process.stdout.readline()
        if not ready.startswith(b"listening on"):
            raise AssertionError(f"the listener did not start: {ready!r}\n{log.read_text()[-4000:]}")
        return ListenerProcess(port=port, process=process)

    yield start
    for process in started:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


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
