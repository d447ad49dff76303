"""Shared fixtures: named personas with real API keys, talking to a real live HTTP server.

Every API test goes over real HTTP (pytest-django's live server, one thread per request, connections
from a pool) against the real database: no mocks of the database anywhere.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import shutil
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from django.db import connection

from agentcal import rate_limits
from workspaces.keys import api_key_create, verified_keys
from workspaces.models import Agent, ApiKey, Scope, Workspace

ALL_SCOPES = list(Scope.values)


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    # Stored files (mail attachments) go to a folder of this test process's own, removed at its end.
    settings.MEDIA_ROOT = tempfile.mkdtemp(prefix="agentcal-media-")
    atexit.register(shutil.rmtree, settings.MEDIA_ROOT, ignore_errors=True)

    # A fast argon2 for tests (the production parameters cost ~50 ms per hash).
    settings.ARGON2_TIME_COST = 1
    settings.ARGON2_MEMORY_COST_KIB = 8
    settings.ARGON2_PARALLELISM = 1
    # The live server serves each request on a new thread and closes that thread's connections after
    # it, so every request would open a PostgreSQL connection (a backend fork, a cold catalog cache):
    # ~15 % of the suite's time. Django's connection pool hands them on instead. Sixteen
    # covers the most concurrent requests a test makes (a dozen racers); CONN_HEALTH_CHECKS makes the
    # pool check each connection as it hands it out.
    database: dict[str, Any] = settings.DATABASES["default"]
    database["CONN_MAX_AGE"] = 0  # a pool replaces persistent connections
    database["OPTIONS"] = {
        **database.get("OPTIONS", {}),
        "pool": {"min_size": 0, "max_size": 16, "timeout": 10},
    }
    _empty_tables_with_delete()


def _empty_tables_with_delete() -> None:
    """After each transactional test Django empties every table with one TRUNCATE, then replays
    post_migrate (content types and permissions, row by row). Nothing here uses post_migrate's rows,
    and a test leaves a handful of rows behind, which DELETE removes far faster than TRUNCATE creates
    new files for every table (docs/performance-notes.md has the figures). Deleting needs the
    triggers off (the audit table refuses deletes; foreign keys would need an order), which takes a
    superuser; without one the reset falls back to Django's TRUNCATE."""
    from django.core.management import call_command
    from django.db import connections
    from django.db.utils import DatabaseError
    from django.test import TransactionTestCase

    def reset(db_name: str) -> None:
        conn = connections[db_name]
        tables = conn.introspection.django_table_names(only_existing=True, include_views=False)
        deletes = "".join(f"DELETE FROM {conn.ops.quote_name(table)};" for table in tables)
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"BEGIN; SET LOCAL session_replication_role = replica; {deletes} COMMIT;")
        except DatabaseError:
            with conn.cursor() as cursor:
                cursor.execute("ROLLBACK")
            call_command(
                "flush",
                verbosity=0,
                interactive=False,
                database=db_name,
                reset_sequences=False,
                allow_cascade=False,
                inhibit_post_migrate=True,
            )

    def fixture_teardown(self: Any) -> None:  # Django's private hook, not in its stubs
        for db_name in self._databases_names(include_mirrors=False):
            reset(db_name)

    setattr(TransactionTestCase, "_fixture_teardown", fixture_teardown)  # noqa: B010 — private, unstubbed


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


@pytest.fixture
def app_server(transactional_db: None) -> Iterator[str]:
    """The real application under gunicorn (the production server) on the test database."""
    from bench.server import GunicornServer

    with GunicornServer(
        "agentcal.wsgi:application",
        workers=2,
        health_path="/v1/health",
        env={"DATABASE_URL": test_database_url(), "DB_CONN_MAX_AGE": "60"},
    ) as url:
        yield url


@pytest.fixture(autouse=True)
def _full_rate_budgets() -> None:
    """The in-memory budgets of callers without a key are per address, and every test calls from
    127.0.0.1: each test starts with them full."""
    rate_limits.reset()


@pytest.fixture
def make_agent(live_server: Any, transactional_db: None) -> Iterator[Callable[..., Persona]]:
    clients: list[httpx.Client] = []
    counter = itertools.count()

    def make(
        name: str | None = None,
        *,
        workspace: str = "acme",
        priority: int = 100,
        max_priority: int | None = None,
        scopes: list[str] | None = None,
    ) -> Persona:
        ws, _ = Workspace.objects.get_or_create(slug=workspace, defaults={"name": workspace.title()})
        name = name or f"agent-{next(counter)}"
        agent = Agent.objects.create(
            workspace=ws,
            name=name,
            slug=name,
            priority=priority,
            max_priority=max_priority if max_priority is not None else priority,
        )
        key, raw = api_key_create(agent=agent, scopes=ALL_SCOPES if scopes is None else scopes)
        # Connection: close — Django's test live server handles keep-alive connections slowly
        # (~50 ms a request instead of ~15 ms).
        client = http_client(
            f"{live_server.url}/v1", headers={"Authorization": f"Bearer {raw}", "Connection": "close"}
        )
        clients.append(client)
        return Persona(agent=agent, key=key, raw_key=raw, client=client)

    yield make
    for client in clients:
        client.close()
    verified_keys.clear()


@pytest.fixture
def sdr(make_agent: Callable[..., Persona]) -> Persona:
    """A sales-development agent at ordinary priority."""
    return make_agent("sdr", priority=100, max_priority=200)


@pytest.fixture
def exec_assistant(make_agent: Callable[..., Persona]) -> Persona:
    """An executive assistant that may outrank the SDR."""
    return make_agent("exec-assistant", priority=500, max_priority=900)


@pytest.fixture
def outsider(make_agent: Callable[..., Persona]) -> Persona:
    """An agent of another workspace: must never see acme's objects."""
    return make_agent("outsider", workspace="globex", priority=900, max_priority=1000)


@pytest.fixture
def anonymous(live_server: Any) -> Iterator[httpx.Client]:
    with http_client(f"{live_server.url}/v1") as client:
        yield client


def create_calendar(persona: Persona, **settings: Any) -> dict[str, Any]:
    response = persona.client.post("/calendars", json={"name": "Shared calendar", **settings})
    assert response.status_code == 201, response.text
    return response.json()


@pytest.fixture
def calendar(sdr: Persona) -> dict[str, Any]:
    return create_calendar(sdr)


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


def audit_rows(**filters: Any) -> list[Any]:
    from audit.models import AuditRecord

    return list(AuditRecord.objects.filter(**filters).order_by("id"))
