"""Fixtures for any test: a real local webhook receiver and a real Celery worker (in-process thread, real
Redis broker)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from agentcal import broker
from agentcal.celery import app as celery_app
from tests.webhooks.helpers import Received, Receiver


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
    purge_queue()
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10) as worker:
        yield worker


def purge_queue(*, wait_for_publisher: bool = True) -> None:
    # Messages left by an earlier test (e.g. retries scheduled for deliveries of a flushed database)
    # must not reach this test's worker, nor those this test's fixtures sent (a linked calendar's first
    # sync): the test decides when its worker gets work. The broker publishes from its own thread, so
    # wait for what is on its way first, or it lands after the purge.
    if wait_for_publisher:
        assert broker.wait_idle(timeout=10)
    with celery_app.connection_for_write() as connection:
        celery_app.amqp.queues["celery"].bind(connection).purge()
