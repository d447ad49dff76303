"""A write that finds its calendar locked by another write in flight waits for that write to end without
queueing for the lock, then looks again: it loses there if the other write took its span (the losers of a
herd answer together, not one lock turn at a time), and otherwise takes the lock and proceeds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import psycopg
import pytest
from django.db import connection

from agentcal.errors import SlotConflict
from bench.runner import conninfo_for_baselines
from bookings import engine
from bookings.engine import reserve
from bookings.models import Calendar, Reservation, ReservationStatus
from bookings.spans import Span
from tests.bookings.helpers import half_hour
from tests.helpers import audit_rows, create_calendar, overlapping_live_pairs, slot
from workspaces.actor import Actor

pytestmark = [pytest.mark.slow, pytest.mark.concurrency]


@pytest.fixture
def writer_in_flight() -> Iterator[psycopg.Connection[Any]]:
    """A separate connection whose open transaction holds a calendar's lock, as the engine's does."""
    with psycopg.connect(conninfo_for_baselines()) as conn:
        yield conn


def _lock(conn: psycopg.Connection[Any], calendar_pk: int) -> None:
    conn.execute("UPDATE bookings_calendar SET version = version + 1 WHERE id = %s", [calendar_pk])


def _row_lock_awaited(conn: psycopg.Connection[Any], table: str, timeout: float = 10.0) -> str:
    """How another backend on this test database (parallel workers have their own) waits for a row of
    `table` that `conn`'s transaction has locked: the mode of the row lock it is granted once that
    transaction ends — 'RowShareLock' for FOR SHARE, beside the lock's queue; 'ExclusiveLock' for FOR
    (NO KEY) UPDATE or an UPDATE, in it — or '' if none waits."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(conninfo_for_baselines(), autocommit=True) as probe:
        while time.monotonic() < deadline:
            row = probe.execute(
                "SELECT l.mode FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'tuple' AND l.relation = %s::regclass AND a.wait_event_type = 'Lock'"
                " AND a.pid <> %s AND a.datname = current_database()",
                [table, conn.info.backend_pid],
            ).fetchone()
            if row:
                return str(row[0])
            time.sleep(0.02)
    return ""


def _insert_hold(
    conn: psycopg.Connection[Any], *, calendar_pk: int, agent_pk: int, span: dict[str, str]
) -> None:
    """What the writer in flight books (by hand: this test plays the other engine transaction)."""
    conn.execute(
        """INSERT INTO bookings_reservation (hold_id, calendar_id, agent_id, is_primary, status, priority,
                  start_time, end_time, fencing_token, version, title, attendees, metadata, created_at,
                  expires_at)
           VALUES (%s, %s, %s, true, 'held', 100, %s, %s, 1, 1, '', '[]', '{}', now(),
                   now() + interval '5 minutes')""",
        [
            f"hld_{uuid.uuid4().hex[:20]}",
            calendar_pk,
            agent_pk,
            datetime.fromisoformat(span["start_time"]),
            datetime.fromisoformat(span["end_time"]),
        ],
    )


def test_a_loser_waits_for_the_write_in_flight_then_loses_without_taking_the_lock(
    make_agent, writer_in_flight
):
    first, second = make_agent("first"), make_agent("second")
    cal = create_calendar(first)
    calendar_pk = Calendar.objects.get(public_id=cal["id"]).pk
    span = slot(hours_ahead=50)
    _lock(writer_in_flight, calendar_pk)

    with ThreadPoolExecutor(max_workers=1) as pool, second.new_client() as client:
        pending = pool.submit(client.post, f"/calendars/{cal['id']}/holds", json=span)
        # It waits behind the writer with a share lock: not in the queue for the calendar's lock.
        assert _row_lock_awaited(writer_in_flight, "bookings_calendar") == "RowShareLock"
        assert not pending.done()
        # The writer in flight books the span and commits.
        _insert_hold(writer_in_flight, calendar_pk=calendar_pk, agent_pk=first.agent.pk, span=span)
        writer_in_flight.commit()
        response = pending.result(timeout=30)

    assert response.status_code == 409, response.text
    body = response.json()
    assert body["error"] == "slot_conflict"
    assert body["conflicting"]["agent_id"] == first.id
    assert body["alternatives"]
    assert overlapping_live_pairs(cal["id"]) == []
    assert len(audit_rows(event_type="calendar.hold.rejected", calendar_public_id=cal["id"])) == 1


def test_a_write_that_waited_for_an_unrelated_write_then_takes_the_lock(make_agent, writer_in_flight):
    first, second = make_agent("first"), make_agent("second")
    cal = create_calendar(first)
    calendar_pk = Calendar.objects.get(public_id=cal["id"]).pk
    theirs, mine = slot(hours_ahead=50), slot(hours_ahead=52)
    _lock(writer_in_flight, calendar_pk)

    with ThreadPoolExecutor(max_workers=1) as pool, second.new_client() as client:
        pending = pool.submit(client.post, f"/calendars/{cal['id']}/holds", json=mine)
        assert _row_lock_awaited(writer_in_flight, "bookings_calendar") == "RowShareLock"
        _insert_hold(writer_in_flight, calendar_pk=calendar_pk, agent_pk=first.agent.pk, span=theirs)
        writer_in_flight.commit()
        response = pending.result(timeout=30)

    assert response.status_code == 201, response.text
    held = Reservation.objects.get(hold_id=response.json()["id"])
    assert held.status == ReservationStatus.HELD
    # It locked the calendar after the writer: its fencing token is newer than the writer's version.
    assert held.fencing_token == Calendar.objects.get(pk=calendar_pk).version
    assert overlapping_live_pairs(cal["id"]) == []


def test_a_commit_queues_for_the_lock_inside_its_statement(make_agent, writer_in_flight):
    agent = make_agent("first")
    cal = create_calendar(agent)
    calendar_pk = Calendar.objects.get(public_id=cal["id"]).pk
    with agent.new_client() as client:
        held = client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=50)).json()
    held_at = Calendar.objects.get(pk=calendar_pk).version
    _lock(writer_in_flight, calendar_pk)

    with ThreadPoolExecutor(max_workers=1) as pool, agent.new_client() as client:
        pending = pool.submit(
            client.post, f"/calendars/{cal['id']}/commits", json={"hold_token": held["hold_token"]}
        )
        # A commit needs no snapshot as new as the lock: it waits in the lock's queue, in its statement.
        assert _row_lock_awaited(writer_in_flight, "bookings_calendar") == "ExclusiveLock"
        assert not pending.done()
        writer_in_flight.commit()
        response = pending.result(timeout=30)

    assert response.status_code == 201, response.text
    assert Reservation.objects.get(hold_id=held["id"]).status == ReservationStatus.COMMITTED
    # The writer's bump, then the commit's own, made after the writer ended.
    assert Calendar.objects.get(pk=calendar_pk).version == held_at + 2


@pytest.fixture
def every_look_queues(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every one-statement look at a span waits in the calendar lock's queue, as a hold's second look
    does; returns the `queue` each look was asked with, one per statement."""
    looks: list[bool] = []
    real = reserve.reserve_in_one_statement

    def queued(**kwargs: Any) -> Any:
        looks.append(kwargs["queue"])
        return real(**{**kwargs, "queue": True})

    monkeypatch.setattr(reserve, "reserve_in_one_statement", queued)
    return looks


def _hold_in_a_thread(actor: Actor, calendar: Calendar, span: Span) -> Any:
    try:
        return engine.hold_create(actor=actor, calendar=calendar, span=span)
    finally:
        connection.close()  # this thread's own


def _as_body(span: Span) -> dict[str, str]:
    return {"start_time": span.start.isoformat(), "end_time": span.end.isoformat()}


def test_a_hold_that_queued_for_the_lock_looks_again_and_writes_in_the_same_statement(
    actor: Actor, writer_in_flight: psycopg.Connection[Any], every_look_queues: list[bool]
) -> None:
    assert actor.agent is not None
    calendar = engine.calendar_create(actor=actor, name="room")
    mine, theirs = half_hour(50), half_hour(52)
    _lock(writer_in_flight, calendar.pk)

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_hold_in_a_thread, actor, calendar, mine)
        assert _row_lock_awaited(writer_in_flight, "bookings_calendar") == "ExclusiveLock"
        # The writer books another span: the waiting statement's snapshot no longer shows everything.
        _insert_hold(
            writer_in_flight, calendar_pk=calendar.pk, agent_pk=actor.agent.pk, span=_as_body(theirs)
        )
        writer_in_flight.commit()
        group = pending.result(timeout=30)

    # Its fresh look under the lock found its span still empty: written by the statement that waited.
    assert every_look_queues == [False]
    assert group.primary.fencing_token == Calendar.objects.get(pk=calendar.pk).version
    assert overlapping_live_pairs(calendar.public_id) == []


def test_a_hold_that_queued_for_the_lock_sees_busy_time_added_while_it_waited(
    actor: Actor, writer_in_flight: psycopg.Connection[Any], every_look_queues: list[bool]
) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    span = half_hour(50)
    _lock(writer_in_flight, calendar.pk)

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_hold_in_a_thread, actor, calendar, span)
        assert _row_lock_awaited(writer_in_flight, "bookings_calendar") == "ExclusiveLock"
        # A sync writes the owner's own meeting over the span (no exclusion constraint covers it).
        writer_in_flight.execute(
            "INSERT INTO bookings_busyblock (calendar_id, source, connection_id, event_key, start_time,"
            " end_time) VALUES (%s, 'caldav', 1, 'phone-meeting', %s, %s)",
            [calendar.pk, span.start, span.end],
        )
        writer_in_flight.commit()
        with pytest.raises(SlotConflict) as refused:
            pending.result(timeout=30)

    # The statement that waited wrote nothing; the next look read the block and said so.
    assert every_look_queues == [False, True]
    assert refused.value.extra["conflicting"]["status"] == "busy"
    assert not Reservation.objects.filter(calendar=calendar).exists()
