"""The round trips an API request costs, pinned, over the whole request path (Django's handler, the
middleware, DRF, the API key, the calendar, the view, the engine) on a warm connection, and counted
on the wire: libpq traces the connection, so every statement is seen — BEGIN, COMMIT, Django's
health check and the key and calendar look-ups included, not only what Django's cursor wrapper sees.

A request runs in this thread, on a connection set up as production's (persistent, health-checked,
no pool), and the test does what Django's `request_started` does before each request (the test client
skips it): arm the health check.

What a request costs today (docs/performance-notes.md has why each is what it is):
- a hold that wins: ONE statement (pre-check, lock, rows in one autocommit statement; no BEGIN/COMMIT);
- a hold refused by the pre-check: two (that statement, which also reads what the alternatives need;
  then the refusal's audit row, which must exist and must say what it was refused for);
- a commit: ONE (found by its token, committed, with its audit and outbox rows made from the row);
- a loser that found the winner still writing: three (the one statement, which found the lock taken and
  waited for the winner inside it; the look; the audit);
- a search across calendars: one read-only snapshot of two reads, however many calendars.
"""

from __future__ import annotations

import os
import re
import select
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.db import connection, connections
from django.db.utils import load_backend
from django.test import Client
from psycopg import pq

from agentcal.local_cache import generation
from bench.cost import bound_statement_name, parsed_statement
from bench.runner import conninfo_for_baselines
from bookings.models import Calendar, Reservation
from tests.helpers import audit_rows, slot
from workspaces.keys import api_key_create
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Wire:
    """What the connection sent: each statement's first words, and how many round trips it waited on."""

    statements: list[str] = field(default_factory=list)
    round_trips: int = 0
    prepared: set[str] = field(default_factory=set)  # names of statements the trace saw prepared

    def read(self, trace: str) -> None:
        # One message per line, except that a statement's text keeps its own line breaks.
        for direction, message, text in re.findall(
            r"^([FB])\t\d+\t(\w+)\t?(.*?)(?=^[FB]\t|\Z)", trace, re.M | re.S
        ):
            if direction == "F" and message == "Query":  # simple protocol: BEGIN, COMMIT, ROLLBACK
                self.statements.append(text.strip().strip('"'))
            elif direction == "F" and message == "Parse":
                name, statement = parsed_statement(text)
                self.statements.append(" ".join(statement.split())[:40])
                if name:
                    self.prepared.add(name)
            elif direction == "F" and message == "Bind":
                name = bound_statement_name(text)
                if name and name not in self.prepared:  # one prepared before the trace: no Parse
                    self.statements.append(f"(prepared {name})")
            elif direction == "B" and message == "ReadyForQuery":
                self.round_trips += 1


@contextmanager
def wire() -> Iterator[Wire]:
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    seen = Wire()
    with tempfile.TemporaryFile(mode="w+") as trace:
        pgconn.trace(os.dup(trace.fileno()))
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield seen
        finally:
            pgconn.untrace()  # flushes the trace
            trace.seek(0)
            seen.read(trace.read())


@pytest.fixture
def production_connection(transactional_db: None) -> Iterator[None]:
    """This thread's database connection as production has it: persistent (CONN_MAX_AGE), health
    checks on, no pool (the test settings hand out pooled connections, which the pool checks itself)."""
    pooled = connections["default"]
    options = {k: v for k, v in pooled.settings_dict["OPTIONS"].items() if k != "pool"}
    settings_dict = {
        **pooled.settings_dict,
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": options,
    }
    persistent = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, "default")
    connections["default"] = persistent
    try:
        yield
    finally:
        persistent.close()
        connections["default"] = pooled


@dataclass
class Agentish:
    client: Client
    agent: Agent

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        # The copies of key and calendar rows are trusted while the poller thread has read the shared
        # generation in the last 0.5 s; on a loaded machine it may be late, so read it here too (Redis,
        # not the traced connection).
        assert generation.poll_once()
        # What request_started does in production (Django's test client leaves it out): the next query
        # runs the health check, with CONN_HEALTH_CHECKS.
        connection.close_if_unusable_or_obsolete()
        call = getattr(self.client, method)
        return call(f"/v1{path}", body or {}, content_type="application/json")


def make_agentish(workspace: Workspace, slug: str) -> Agentish:
    agent = Agent.objects.create(workspace=workspace, name=slug, slug=slug, priority=100, max_priority=500)
    _, raw = api_key_create(agent=agent, scopes=["calendars:write", "bookings:read", "bookings:write"])
    return Agentish(client=Client(HTTP_AUTHORIZATION=f"Bearer {raw}"), agent=agent)


@pytest.fixture
def agents(production_connection: None) -> tuple[Agentish, Agentish, str]:
    """Two agents of one workspace with keys, and a calendar: every cache warm, the connection too."""
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    first, second = make_agentish(workspace, "first"), make_agentish(workspace, "second")
    calendar = first.request("post", "/calendars", {"name": "room"}).json()["id"]
    # Each agent's key and the calendar as this process keeps them (the poller thread reads the shared
    # generation every 0.1 s; this reads it now), and each key's last_used_at written once.
    assert generation.poll_once()
    for hours_ahead, agent in ((200, first), (202, second)):
        warm_up = agent.request("post", f"/calendars/{calendar}/holds", slot(hours_ahead=hours_ahead))
        assert warm_up.status_code == 201, warm_up.content
    assert generation.poll_once()
    return first, second, calendar


def test_a_winning_hold_is_one_statement(agents: tuple[Agentish, Agentish, str]) -> None:
    first, _, calendar = agents
    with wire() as sent:
        response = first.request("post", f"/calendars/{calendar}/holds", slot(hours_ahead=30))
    assert response.status_code == 201, response.content
    # No health check, no key or calendar read, no BEGIN/COMMIT: the hold, its audit row and its event.
    assert [s.split()[0] for s in sent.statements] == ["WITH"], sent.statements
    assert sent.round_trips == 1
    assert (
        len(audit_rows(event_type="calendar.hold.created", reservation_public_id=response.json()["id"])) == 1
    )


def test_the_write_is_prepared_on_its_connection_and_still_one_statement(
    agents: tuple[Agentish, Agentish, str], settings: Any
) -> None:
    first, _, calendar = agents
    assert settings.DB_PREPARED_STATEMENTS, "no pooler in front of the test database"
    for hours_ahead in range(40, 40 + settings.PREPARE_THRESHOLD):
        assert (
            first.request("post", f"/calendars/{calendar}/holds", slot(hours_ahead=hours_ahead)).status_code
            == 201
        )

    with wire() as sent:
        response = first.request("post", f"/calendars/{calendar}/holds", slot(hours_ahead=30))

    assert response.status_code == 201, response.content
    # Sent by name, with no statement text to parse or plan; still one round trip.
    assert len(sent.statements) == 1 and sent.statements[0].startswith("(prepared "), sent.statements
    assert sent.round_trips == 1
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE name = %s", [sent.statements[0][10:-1]]
        )
        (statement,) = cursor.fetchone()
    assert "bookings_reservation" in statement and "audit_auditrecord" in statement


def test_a_booking_in_one_step_is_one_statement(agents: tuple[Agentish, Agentish, str]) -> None:
    first, _, calendar = agents
    with wire() as sent:
        response = first.request("post", f"/calendars/{calendar}/commits", slot(hours_ahead=30))
    assert response.status_code == 201, response.content
    assert sent.round_trips == 1, sent.statements


def test_a_loser_refused_by_the_precheck_is_two_statements_and_takes_no_lock(
    agents: tuple[Agentish, Agentish, str],
) -> None:
    first, second, calendar = agents
    span = slot(hours_ahead=30)
    assert first.request("post", f"/calendars/{calendar}/holds", span).status_code == 201
    version = Calendar.objects.get(public_id=calendar).version

    with wire() as sent:
        response = second.request("post", f"/calendars/{calendar}/holds", span)

    assert response.status_code == 409, response.content
    assert response.json()["alternatives"]
    # The pre-check (which also read what the alternatives need), then the refusal's audit row.
    assert [s.split()[0] for s in sent.statements] == ["WITH", "INSERT"], sent.statements
    assert sent.round_trips == 2
    assert Calendar.objects.get(public_id=calendar).version == version  # the lock was never taken
    (refusal,) = audit_rows(event_type="calendar.hold.rejected", calendar_public_id=calendar)
    assert refusal.agent_public_id == second.agent.public_id
    assert refusal.conflict_details["alternatives"] == response.json()["alternatives"]


def test_a_commit_is_one_statement(agents: tuple[Agentish, Agentish, str]) -> None:
    first, _, calendar = agents
    held = first.request("post", f"/calendars/{calendar}/holds", slot(hours_ahead=30)).json()

    with wire() as sent:
        response = first.request("post", f"/calendars/{calendar}/commits", {"hold_token": held["hold_token"]})

    assert response.status_code == 201, response.content
    # The commit by the hold's token, with its audit and outbox rows.
    assert [s.split()[0] for s in sent.statements] == ["WITH"], sent.statements
    assert sent.round_trips == 1
    assert Reservation.objects.get(hold_id=held["id"]).status == "committed"


def test_a_loser_that_found_the_winner_writing_is_three_statements(
    agents: tuple[Agentish, Agentish, str],
) -> None:
    first, second, calendar = agents
    span = slot(hours_ahead=30)
    calendar_pk = Calendar.objects.get(public_id=calendar).pk
    with psycopg.connect(conninfo_for_baselines()) as winner:
        # The winner's write in flight: it holds the calendar's lock until it books the span and commits.
        winner.execute("UPDATE bookings_calendar SET version = version + 1 WHERE id = %s", [calendar_pk])
        booked = threading.Event()

        def book_when_the_loser_waits() -> None:
            with psycopg.connect(conninfo_for_baselines(), autocommit=True) as probe:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    if probe.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
                        " AND datname = current_database()",
                        ["%FOR SHARE%"],
                    ).fetchone():
                        break
                    time.sleep(0.01)
            winner.execute(
                """INSERT INTO bookings_reservation (hold_id, calendar_id, agent_id, is_primary, status,
                          priority, start_time, end_time, fencing_token, version, title, attendees, metadata,
                          created_at, expires_at)
                   VALUES ('hld_winnerinflight0001', %s, %s, true, 'held', 100, %s, %s, 1, 1, '', '[]', '{}',
                           now(), now() + interval '5 minutes')""",
                [calendar_pk, first.agent.pk, span["start_time"], span["end_time"]],
            )
            winner.commit()
            booked.set()

        thread = threading.Thread(target=book_when_the_loser_waits)
        thread.start()
        with wire() as sent:
            response = second.request("post", f"/calendars/{calendar}/holds", span)
        thread.join()

    assert booked.is_set()
    assert response.status_code == 409, response.content
    # The one statement (the lock taken: it waited for the winner inside it, with a share lock, not in
    # the lock's queue), the one statement again (now it sees the winner: refused, with what the
    # alternatives need), the audit row.
    assert [s.split()[0] for s in sent.statements] == ["WITH", "WITH", "INSERT"], sent.statements
    assert sent.round_trips == 3


# --- The health check ----------------------------------------------------------------------------------


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_connection_idle_longer_than_the_limit_is_checked_with_select_1(
    agents: tuple[Agentish, Agentish, str], settings: Any
) -> None:
    first, _, calendar = agents
    settings.DB_HEALTH_CHECK_IDLE_SECONDS = 0.2
    time.sleep(0.3)
    assert generation.poll_once()

    with wire() as sent:
        response = first.request("post", f"/calendars/{calendar}/holds", slot(hours_ahead=30))

    assert response.status_code == 201, response.content
    assert sent.statements[0] == "SELECT 1", sent.statements


def test_a_connection_the_server_ended_while_idle_is_replaced_before_the_request_uses_it(
    agents: tuple[Agentish, Agentish, str],
) -> None:
    first, _, calendar = agents
    ended = backend_pid()
    with psycopg.connect(conninfo_for_baselines(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [ended])
    # The server's goodbye (a FATAL message, then the end of the stream) reaches the idle socket.
    deadline = time.monotonic() + 5
    while not select.select([connection.connection.fileno()], [], [], 0.05)[0]:
        assert time.monotonic() < deadline

    response = first.request("post", f"/calendars/{calendar}/holds", slot(hours_ahead=30))

    assert response.status_code == 201, response.content
    assert backend_pid() != ended


def test_a_search_across_calendars_is_one_snapshot_whatever_the_number_of_calendars(
    agents: tuple[Agentish, Agentish, str],
) -> None:
    first, _, calendar = agents
    others = [first.request("post", "/calendars", {"name": f"person {n}"}).json()["id"] for n in range(4)]
    for n, other in enumerate(others):
        assert first.request("post", f"/calendars/{other}/holds", slot(hours_ahead=20 + n)).status_code == 201
    window = slot(hours_ahead=18, minutes=12 * 60)
    body = {
        "calendars": [calendar, *others[:2]],
        "optional_calendars": others[2:],
        "duration_minutes": 30,
        "start": window["start_time"],
        "end": window["end_time"],
    }
    assert generation.poll_once()
    with wire() as sent:
        response = first.request("post", "/availability/search", body)
    assert response.status_code == 200, response.content
    assert response.json()["candidates"]
    # The snapshot: its isolation, the calendars (with now), their busy time merged (reservations and
    # busy blocks in one statement).
    assert [s.split()[0] for s in sent.statements] == ["BEGIN", "SET", "SELECT", "SELECT", "COMMIT"], (
        sent.statements
    )
    assert sent.round_trips == 5
