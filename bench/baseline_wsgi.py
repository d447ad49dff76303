"""Baselines (a) and (b) over HTTP: a WSGI app the benchmark serves with the same gunicorn settings as
AgentCal (`python -m gunicorn bench.baseline_wsgi:app --workers N`), so "engine through HTTP" is compared
with "advisory lock through HTTP" on the same server software, worker count and database.

psycopg and JSON only, with no authentication: a generous bar for the engine.
POST /advisory_lock/<calendar_id> or /naive/<calendar_id> answers 201 or 409; GET /health answers 200.

Why a separate app rather than a Django view: docs/benchmark.md, "What is measured".
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable
from datetime import datetime
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import psycopg

from bench.baselines import DEFAULT_SCHEMA, BaselineStore

# Set by the benchmark in the environment of the gunicorn it starts.
ENV_CONNINFO = "AGENTCAL_BENCH_BASELINE_DB"
ENV_SCHEMA = "AGENTCAL_BENCH_BASELINE_SCHEMA"
# "0": do not prepare statements (a transaction-mode pooler is in front; bench.baselines).
ENV_PREPARE = "AGENTCAL_BENCH_BASELINE_PREPARE"

_ROUTE = re.compile(r"/(naive|advisory_lock)/(\d+)")


def make_app(conninfo: str, schema: str = DEFAULT_SCHEMA, *, prepare: bool = True) -> WSGIApplication:
    # One connection per worker thread, kept open like Django's persistent connections (DB_CONN_MAX_AGE).
    local = threading.local()

    def store() -> BaselineStore:
        current: BaselineStore | None = getattr(local, "store", None)
        if current is None or current.conn.closed:
            current = local.store = BaselineStore(conninfo, schema=schema, prepare=prepare)
        return current

    def application(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        if path == "/health":
            return _respond(start_response, 200, {"status": "ok"})
        route = _ROUTE.fullmatch(path)
        if route is None or method != "POST":
            return _respond(start_response, 404, {"error": "not_found"})
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            data = json.loads(environ["wsgi.input"].read(length))
            start = datetime.fromisoformat(data["start_time"])
            end = datetime.fromisoformat(data["end_time"])
            agent = str(data.get("agent", ""))
        except (ValueError, KeyError, TypeError):
            return _respond(start_response, 400, {"error": "invalid_request"})
        try:
            status = store().reserve(
                route.group(1), calendar_id=int(route.group(2)), start=start, end=end, agent=agent
            )
        except psycopg.Error as exc:
            local.store = None
            return _respond(start_response, 500, {"error": type(exc).__name__})
        if status == 409:
            return _respond(start_response, 409, {"error": "slot_conflict"})
        return _respond(start_response, 201, {"status": "booked"})

    return application


def _respond(start_response: StartResponse, status: int, body: dict[str, str]) -> list[bytes]:
    payload = json.dumps(body).encode()
    reason = {200: "OK", 201: "Created", 400: "Bad Request", 404: "Not Found", 409: "Conflict"}
    start_response(
        f"{status} {reason.get(status, 'Internal Server Error')}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
    )
    return [payload]


_app: WSGIApplication | None = None


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The gunicorn entry point: configured from the environment the benchmark passes down."""
    global _app
    if _app is None:
        _app = make_app(
            os.environ[ENV_CONNINFO],
            os.environ.get(ENV_SCHEMA, DEFAULT_SCHEMA),
            prepare=os.environ.get(ENV_PREPARE, "1") != "0",
        )
    return _app(environ, start_response)
