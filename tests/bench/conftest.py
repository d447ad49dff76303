"""Tiny benchmark runs against the test database: the invariants, not the speed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from bench.baseline_wsgi import make_app
from bench.runner import conninfo_for_baselines
from tests.bench.helpers import TEST_SCHEMA


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.bench)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def baseline_server(transactional_db: None) -> Iterator[str]:
    """The baseline WSGI app on a loopback thread server, on the test database (no gunicorn)."""
    server = make_server(
        "127.0.0.1",
        0,
        make_app(conninfo_for_baselines(), TEST_SCHEMA),
        server_class=_ThreadingWSGIServer,
        handler_class=_QuietHandler,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
