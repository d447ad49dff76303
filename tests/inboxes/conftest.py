"""An SMTP listener on a free port (in this process, or the management command in a process of its own),
and messages built for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from inboxes.smtp import inbound_controller
from tests.helpers import test_database_url
from tests.inboxes.helpers import ListenerProcess, free_port

BASE_DIR = Path(__file__).resolve().parent.parent.parent


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
