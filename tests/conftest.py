"""Shared fixtures: named personas with real API keys, talking to a real live HTTP server.

Every API test goes over real HTTP (pytest-django's live server, one thread per request, connections
from a pool) against the real database: no mocks of the database anywhere.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from agentcal import rate_limits
from tests.helpers import ALL_SCOPES, Persona, create_calendar, http_client, test_database_url
from workspaces.keys import api_key_create, verified_keys
from workspaces.models import Agent, Workspace

# Fixtures that tests in several directories use: pytest takes `pytest_plugins` only from the root
# conftest, and finds each fixture by name (nothing imports them).
pytest_plugins = [
    "tests.approvals.fixtures",
    "tests.sync.fixtures",
    "tests.webhooks.fixtures",
]


TEST_REQUEST_RATE = {"requests_per_second": 1000, "request_burst": 1000}


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    # Stored files (mail attachments) go to a folder of this test process's own, removed at its end.
    settings.MEDIA_ROOT = tempfile.mkdtemp(prefix="agentcal-media-")
    atexit.register(shutil.rmtree, settings.MEDIA_ROOT, ignore_errors=True)

    # Tests race dozens of requests from one agent at once: the request rate must not be what they meet
    # (the tests of the limits set an agent's own). The budgets keep the installation's defaults.
    settings.AGENT_LIMIT_DEFAULTS = {**settings.AGENT_LIMIT_DEFAULTS, **TEST_REQUEST_RATE}
    # The live server is one process serving every request of a test on its own thread.
    settings.AGENT_MAX_IN_FLIGHT_PER_PROCESS = 64
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


@pytest.fixture
def app_server(transactional_db: None) -> Iterator[str]:
    """The real application under gunicorn (the production server) on the test database."""
    from bench.server import GunicornServer

    with GunicornServer(
        "agentcal.wsgi:application",
        workers=2,
        health_path="/v1/health",
        env={
            "DATABASE_URL": test_database_url(),
            "DB_CONN_MAX_AGE": "60",
            "AGENT_REQUESTS_PER_SECOND": str(TEST_REQUEST_RATE["requests_per_second"]),
            "AGENT_REQUEST_BURST": str(TEST_REQUEST_RATE["request_burst"]),
        },
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


@pytest.fixture
def calendar(sdr: Persona) -> dict[str, Any]:
    return create_calendar(sdr)
