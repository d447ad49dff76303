"""A real local webhook receiver and a real Celery worker (in-process thread, real Redis broker)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from agentcal.celery import app as celery_app


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; answers with the queued status codes, then with `default_status`."""

    url: str
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    default_status: int = 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.05)
        raise AssertionError(f"expected {count} webhook request(s), got {len(self.requests)}")

    def of_type(self, event_type: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.json["type"] == event_type]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            recv = state["receiver"]
            with recv.lock:
                recv.requests.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
                status = recv.statuses.pop(0) if recv.statuses else recv.default_status
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(f"status {status}".encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["receiver"] = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hooks")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state["receiver"]
    server.shutdown()
    server.server_close()


@pytest.fixture
def webhook_settings(settings: Any) -> Any:
    # The receiver is on loopback, which production refuses; retries a second apart, not minutes.
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    settings.WEBHOOK_RETRY_SCHEDULE = [0, 1, 1, 1]
    settings.WEBHOOK_TIMEOUT_SECONDS = 5
    return settings


@pytest.fixture
def celery_worker(webhook_settings: Any, transactional_db: None) -> Iterator[Any]:
    _purge_queue()
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10) as worker:
        yield worker


def _purge_queue() -> None:
    # Messages left by an earlier test (e.g. retries scheduled for deliveries of a flushed database)
    # must not reach this test's worker.
    with celery_app.connection_for_write() as connection:
        celery_app.amqp.queues["celery"].bind(connection).purge()


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")
