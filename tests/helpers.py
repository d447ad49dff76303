"""Helpers shared by the tests: personas, calendars and time spans, HTTP clients, audit rows."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import os
import ssl
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.db import connection

from workspaces.models import Agent, ApiKey, Scope

ALL_SCOPES = list(Scope.values)
T = TypeVar("T")


def run_coroutine(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run() in a thread of its own: once a browser test has run in this process, Playwright's
    sync API keeps an event loop running in the test thread, where asyncio.run() refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main).result()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def http_client(base_url: str, **options: Any) -> httpx.Client:
    """An httpx client for the test servers. They speak plain HTTP, but every new client would still
    load the system's CA bundle into a TLS context of its own (~50 ms of CPU each): they share one."""
    return httpx.Client(base_url=base_url, verify=_tls_context(), timeout=30, **options)


@dataclass
class Persona:
    """An agent with a real key, and an HTTP client that sends it."""

    agent: Agent
    key: ApiKey
    raw_key: str
    client: httpx.Client

    @property
    def id(self) -> str:
        return self.agent.public_id

    def new_client(self) -> httpx.Client:
        """A separate connection (for concurrent use from another thread)."""
        return http_client(str(self.client.base_url), headers=dict(self.client.headers))


def test_database_url() -> str:
    """DATABASE_URL with the test database's name, for child processes (gunicorn, Celery workers)."""
    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))


def create_calendar(persona: Persona, **settings: Any) -> dict[str, Any]:
    response = persona.client.post("/calendars", json={"name": "Shared calendar", **settings})
    assert response.status_code == 201, response.text
    return response.json()


def slot(hours_ahead: int = 24, minutes: int = 30, *, offset_minutes: int = 0) -> dict[str, str]:
    """A half-open span starting on the hour `hours_ahead` from now (plus an offset), as RFC 3339."""
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours_ahead)
    start = base + timedelta(minutes=offset_minutes)
    end = start + timedelta(minutes=minutes)
    return {"start_time": iso(start), "end_time": iso(end)}


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def overlapping_live_pairs(calendar_public_id: str | None = None) -> list[tuple[Any, ...]]:
    """SQL check used after every concurrency test: pairs of live reservations that overlap."""
    sql = """
        SELECT a.hold_id, b.hold_id, a.calendar_id
          FROM bookings_reservation a
          JOIN bookings_reservation b
            ON a.calendar_id = b.calendar_id AND a.id < b.id
          JOIN bookings_calendar c ON c.id = a.calendar_id
         WHERE a.status IN ('held', 'committed') AND b.status IN ('held', 'committed')
           AND tstzrange(a.start_time, a.end_time, '[)') && tstzrange(b.start_time, b.end_time, '[)')
    """
    params: list[Any] = []
    if calendar_public_id is not None:
        sql += " AND c.public_id = %s"
        params.append(calendar_public_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def backends_blocked_by_this_transaction() -> int:
    """How many backends wait for a lock this connection's open transaction holds. Narrower than any
    lock wait on the server: parallel test workers (and a pooler's other clients) wait on their own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        )
        (count,) = cursor.fetchone()
    return int(count)


def audit_rows(**filters: Any) -> list[Any]:
    from audit.models import AuditRecord

    return list(AuditRecord.objects.filter(**filters).order_by("id"))


def cyclic_garbage(call: Callable[[], T]) -> tuple[T, Counter[str]]:
    """What `call` returned, and the objects it left that only the cyclic collector would free, by type."""
    gc.collect()
    was_enabled, flags = gc.isenabled(), gc.get_debug()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collection finds is kept in gc.garbage, to name it
    try:
        returned = call()
        gc.collect()
        return returned, Counter(type(found).__qualname__ for found in gc.garbage)
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
