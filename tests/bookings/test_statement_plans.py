"""How PostgreSQL plans the engine's statements: each prepared statement keeps one plan, and that plan
reads reservations through an index bounded by the request, whatever the tables' statistics say."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from agentcal.errors import SlotConflict
from bench.runner import conninfo_for_baselines
from bookings import engine
from bookings.models import Reservation
from tests.bookings.helpers import half_hour
from tests.plans import explained, index_names, nodes, statistics_as_found_then_analyzed, unbounded_reads
from workspaces.actor import Actor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skipif(
    settings.DB_TRANSACTION_POOLER or not settings.DB_PREPARED_STATEMENTS,
    reason="nothing is prepared to keep a plan",
)
def test_a_prepared_statement_is_planned_once_not_on_every_execution(actor: Actor) -> None:
    """Under PostgreSQL's default a prepared statement gets a plan of its own on each of its first five
    executions, and on every later one whenever a plan for the values at hand looks cheaper than the
    kept one; planning the one-statement write costs the server more than running it."""
    calendar = engine.calendar_create(actor=actor, name="room")
    for slot in range(12):
        held = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(slot + 2))
        with pytest.raises(SlotConflict):
            engine.hold_create(actor=actor, calendar=calendar, span=half_hour(slot + 2))
        assert held.hold_token is not None
        engine.hold_commit(actor=actor, calendar=calendar, hold_token=held.hold_token)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        prepared = cursor.fetchall()
    # The hold's one statement, the commit's, the refusal's audit row.
    for start in ("WITH pre ", "WITH target ", 'INSERT INTO "audit_auditrecord"'):
        assert any(statement.startswith(start) for statement, _, _ in prepared), start
    replanned = [(statement[:60], custom) for statement, _, custom in prepared if custom]
    assert not replanned


# --- Plans whatever the statistics ---------------------------------------------------------------------


@contextmanager
def _sent(start: str) -> Iterator[list[tuple[str, Any]]]:
    """The statements starting with `start` that the engine sends meanwhile, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def capture(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(start):
            sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        yield sent


def _generic_plan(sql: str, params: Any) -> dict[str, Any]:
    """The generic plan (the one a prepared statement keeps, whatever the parameters) of a statement the
    engine sent (in `$n` placeholders with a list, or named ones with a dict), prepared on a connection
    of its own."""
    with (
        psycopg.connect(conninfo_for_baselines(), autocommit=True) as conn,
        conn.transaction(force_rollback=True),
    ):
        cursor = psycopg.RawCursor(conn) if isinstance(params, list) else conn.cursor()
        cursor.execute(sql, params, prepare=True)
        ((name, count),) = conn.execute(
            "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements"
        ).fetchall()
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        nulls = ", ".join(["NULL"] * count)
        ((plan,),) = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {name}({nulls})").fetchall()
    return dict(plan[0]["Plan"])


def _subplan(plan: dict[str, Any], name: str) -> dict[str, Any]:
    found = [node for node in nodes(plan) if node.get("Subplan Name") == name]
    assert len(found) == 1, (name, plan)
    return found[0]


def _copies(reservation: Reservation, count: int, *, step: str) -> None:
    """`count` copies of a reservation, each `step` after the one before (new hold ids and tokens)."""
    columns = [str(f.column) for f in Reservation._meta.concrete_fields if not f.primary_key]
    made = {
        "hold_id": "r.hold_id || '_' || i",
        "booking_id": "r.booking_id || '_' || i",
        "hold_token_hash": "md5(r.hold_id || i)",
        "start_time": f"r.start_time + i * interval '{step}'",
        "end_time": f"r.end_time + i * interval '{step}'",
    }
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO bookings_reservation ({', '.join(columns)})"
            f" SELECT {', '.join(made.get(c, f'r.{c}') for c in columns)}"
            " FROM bookings_reservation r, generate_series(1, %s) AS i WHERE r.id = %s",
            [count, reservation.pk],
        )


@pytest.mark.parametrize(
    ("two_calendars", "start"),
    [
        (False, "WITH pre "),  # the one-statement hold, refused: its pre-check and the alternatives' read
        (True, "\nSELECT now(), b.id"),  # a hold on two calendars: the general path's pre-check
        (True, "\nWITH expired AS"),  # and its look under the lock, lapsed holds expired first
    ],
)
def test_a_hold_reads_reservations_by_calendar_and_time_whatever_the_statistics(
    actor: Actor, two_calendars: bool, start: str
) -> None:
    """A hold's statements read the reservations in its way through indexes bounded by the request. By
    `calendar_id = ANY(ids)`, on a table not yet analyzed, the one statement's plan read every live
    reservation of the installation through the exclusion constraint's index, on every write."""
    elsewhere = engine.calendar_create(actor=actor, name="elsewhere")
    booked = engine.booking_create(actor=actor, calendar=elsewhere, span=half_hour(30))
    _copies(booked.primary, 3000, step="1 hour")  # 3,000 live bookings on another calendar
    calendar, other = (engine.calendar_create(actor=actor, name=name) for name in ("room", "annex"))
    if two_calendars:
        with _sent(start) as sent:
            engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30), also_calendars=[other])
    else:
        engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
        with _sent(start) as sent, pytest.raises(SlotConflict):
            engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
    ((sql, params),) = sent

    for analyzed in statistics_as_found_then_analyzed("bookings_reservation"):
        plan = _generic_plan(sql, params)
        assert not unbounded_reads(plan, "bookings_reservation"), (analyzed, index_names(plan))


def test_the_commit_finds_its_hold_by_the_token_index_whatever_the_statistics(actor: Actor) -> None:
    """The commit by token must not look its hold up by agent and calendar: without statistics, a
    generic plan that did read every row the agent ever had on the calendar."""
    calendar = engine.calendar_create(actor=actor, name="room")
    ended = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
    assert ended.hold_token is not None
    engine.hold_release(actor=actor, hold_id=ended.primary.hold_id, hold_token=ended.hold_token)
    _copies(ended.primary, 3000, step="0 hours")  # this agent's history on this calendar: ended holds
    held = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(40))
    assert held.hold_token is not None
    with _sent("WITH target AS") as sent:
        engine.hold_commit(actor=actor, calendar=calendar, hold_token=held.hold_token)
    ((sql, params),) = sent

    for analyzed in statistics_as_found_then_analyzed("bookings_reservation"):
        used = index_names(_subplan(_generic_plan(sql, params), "CTE target"))
        assert "reservation_hold_token" in used, (analyzed, used)
        by_agent = [n for n in used if n.startswith(("bookings_reservation_agent_id", "reservation_agent"))]
        assert not by_agent, (analyzed, used)


def test_the_sweep_reads_the_holds_not_the_history_whatever_the_statistics(actor: Actor) -> None:
    """The background sweep runs every few seconds, and its expiry under a calendar's lock: both its
    reads must be bounded by the holds alive or lapsed, never by every reservation the calendar had. By
    the calendar and the status, they read the whole table (a calendar's history, or everyone's)."""
    calendar = engine.calendar_create(actor=actor, name="room")
    booked = engine.booking_create(actor=actor, calendar=calendar, span=half_hour(30))
    _copies(booked.primary, 3000, step="-1 hour")  # this calendar's history: 3,000 earlier bookings
    ended = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(31))
    assert ended.hold_token is not None
    engine.hold_release(actor=actor, hold_id=ended.primary.hold_id, hold_token=ended.hold_token)
    _copies(ended.primary, 3000, step="0 hours")  # and 3,000 holds that ended
    lapsed = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(32))
    Reservation.objects.filter(hold_id=lapsed.primary.hold_id).update(expires_at=Now() - timedelta(seconds=1))
    with _sent("\nWITH expired AS") as sent, CaptureQueriesContext(connection) as queries:
        assert engine.holds_expire_lapsed() == 1
    ((sql, params),) = sent
    (finding,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT DISTINCT")]

    for analyzed in statistics_as_found_then_analyzed("bookings_reservation"):
        assert not unbounded_reads(explained(finding), "bookings_reservation"), (analyzed, finding)
        plan = _generic_plan(sql, params)
        assert not unbounded_reads(plan, "bookings_reservation"), (analyzed, index_names(plan))
