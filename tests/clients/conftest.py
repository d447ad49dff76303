"""Clients under test, talking to the real server (pytest-django's live server, real PostgreSQL).

`agentcal_for(persona)` gives a persona's AgentCal; `FaultyProxy` stands between a client and the server
to lose responses and answer 429/503 the way a real network and a loaded server do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from agentcal_client import AgentCal

from tests.clients.helpers import FaultyProxy, Plan, Seen
from tests.helpers import Persona, http_client


def agentcal(base_url: str, raw_key: str, *, transport: httpx.Client, **options: Any) -> AgentCal:
    return AgentCal(raw_key, base_url=base_url, http_client=transport, **options)


@pytest.fixture
def agentcal_for(live_server: Any) -> Iterator[Callable[..., AgentCal]]:
    transports: list[httpx.Client] = []

    def make(persona: Persona, *, base_url: str | None = None, **options: Any) -> AgentCal:
        # Connection: close — the test live server serves keep-alive connections slowly (tests/conftest.py).
        transport = http_client("", headers={"Connection": "close"})
        transports.append(transport)
        return agentcal(base_url or live_server.url, persona.raw_key, transport=transport, **options)

    yield make
    for transport in transports:
        transport.close()


# --- A proxy that loses responses -------------------------------------------------------------------------


@pytest.fixture
def faulty_proxy(live_server: Any) -> Iterator[Callable[[Plan], FaultyProxy]]:
    servers: list[ThreadingHTTPServer] = []
    upstream = http_client(live_server.url)

    def start(plan: Plan) -> FaultyProxy:
        seen: list[Seen] = []
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                with lock:
                    index = len(seen)
                    record = Seen(
                        time.monotonic(), self.command, self.path, {k.lower(): v for k, v in headers.items()}
                    )
                    seen.append(record)
                action, status, answer_headers, answer_body = plan(index, self.command)
                if action in ("forward", "lose"):
                    response = upstream.request(self.command, self.path, headers=headers, content=body)
                    record.upstream_status = response.status_code
                    record.upstream_headers = {k.lower(): v for k, v in response.headers.items()}
                    record.upstream_body = response.content
                    if action == "forward":
                        status, answer_headers, answer_body = (
                            response.status_code,
                            {
                                "Content-Type": response.headers.get("Content-Type", "application/json"),
                                **answer_headers,
                            },
                            response.content,
                        )
                self.send_response(status)
                for name, value in answer_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer_body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(answer_body)

            do_GET = do_POST = do_PATCH = do_DELETE = _handle  # noqa: N815 (http.server's naming)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return FaultyProxy(url=f"http://127.0.0.1:{server.server_address[1]}", seen=seen)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
    upstream.close()
