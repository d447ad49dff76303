"""The common write as one statement: a hold or booking on one calendar with nothing in its way, and
the commit of a one-calendar hold.

A hold's statement takes the calendar's lock only if free (SKIP LOCKED) and writes only if the
calendar's version in its snapshot is the version it locked; else nothing, and with the lock taken it
first waits for the writer (a share lock: a herd's losers wake together). Its caller looks again, up to
MAX_ONE_STATEMENT_TRIES times, then takes the general path, as anything in the span, several calendars,
If-Match or an open transaction does at once. A commit queues for the lock in its statement.

Design: docs/architecture.md, "The engine's write path"; numbers: docs/performance-notes.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, models

from agentcal.db import InsertBatch, bound_cursor, json_value, loaded
from agentcal.errors import SlotConflict
from audit.models import AuditRecord
from bookings.engine.budgets import budget_sql
from bookings.engine.functions import SPAN_EMPTY_NOW
from bookings.engine.locking import observe_lock_wait
from bookings.engine.statements import PRECHECK_SQL, busy_near_sql, span_empty
from bookings.events import reservation_event_sql
from bookings.models import Calendar, Reservation
from bookings.spans import Span
from bookings.sql import live_hold, span_params
from webhooks.models import EventType, OutboxEvent

# Tries of a one-statement hold while other writes hold the calendar's lock, each after waiting for the
# write in flight to end (or after finding its snapshot older than the lock); then the hold takes the
# general path and queues for the lock like any other write.
MAX_ONE_STATEMENT_TRIES = 3

# The pre-check's columns, named (PRECHECK_SQL reads them positionally).
_PRECHECK_COLUMNS = (
    "now, blocker_id, blocker_status, blocker_priority, blocker_start, blocker_end, blocker_expires_at,"
    " blocker_bump_window_ends_at, blocker_calendar_id, blocker_calendar_public_id, blocker_slot_minutes,"
    " blocker_agent_id, blocker_agent_public_id, upstream_start, upstream_end, upstream_source,"
    " upstream_calendar_id, upstream_calendar_public_id, upstream_slot_minutes"
)
PRECHECK_WIDTH = 19


class RowsFor(InsertBatch):
    """Collects the rows that audit_record(), outbox_emit() and the engine queue, for one statement to
    write (instead of the INSERT that InsertBatch.execute() sends)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[type[models.Model], list[dict[str, Any]]] = {}

    def add(self, model: type[models.Model], values: Mapping[str, Any]) -> None:
        self.rows.setdefault(model, []).append(dict(values))

    def one(self, model: type[models.Model]) -> dict[str, Any]:
        (row,) = self.rows[model]
        return row


@contextmanager
def one_statement_transaction() -> Iterator[None]:
    """Django's bookkeeping of a transaction — on_commit callbacks (metrics, the outbox dispatcher's
    nudge) run only if it commits, none if it raises or calls set_rollback() — around statements sent
    in autocommit, each its own transaction: no BEGIN and COMMIT round trips. Only statements that are
    whole writes by themselves (or write nothing) may run inside, and no atomic block (its savepoint
    would find no transaction and fail).

    Django's own atomic block would switch the connection out of autocommit and back, and this back
    into it, on every write: a sixth of the in-process write's CPU (docs/performance-notes.md). So the
    block is marked as Django marks one, and the connection stays in autocommit, as it is between
    transactions."""
    database = connections[DEFAULT_DB_ALIAS]  # once: each use of the `connection` proxy looks it up
    outside = "A one-statement write runs outside any transaction."
    if database.in_atomic_block:
        raise RuntimeError(outside)
    database.close_if_health_check_failed()  # as Django does when it opens a transaction
    if not database.get_autocommit():  # (which connects)
        raise RuntimeError(outside)
    database.needs_rollback = False
    database.in_atomic_block = True
    committed = False
    try:
        yield
        committed = not database.needs_rollback  # set_rollback(True): nothing was written
    finally:
        database.in_atomic_block = False
        if not committed:
            database.needs_rollback, database.run_on_commit = False, []
    if committed:
        database.run_and_clear_commit_hooks()


# --- Statement building ------------------------------------------------------------------------------


def _insert_select(
    model: type[models.Model], names: Sequence[str], computed: Mapping[str, str], *, source: str
) -> str:
    """`INSERT INTO table (columns) SELECT … FROM source`: a row of the caller's values (parameters
    named `<table>__<field>`), except the `computed` columns (SQL over `source`). One row per row of
    `source`, none when it is empty."""
    quote = connection.ops.quote_name
    table = model._meta.db_table
    columns = ", ".join(quote(str(_field(model, name).column)) for name in names)
    values = ", ".join(computed.get(name, f"%({table}__{name})s") for name in names)
    return f"INSERT INTO {quote(table)} ({columns}) SELECT {values} FROM {source}"


def _insert_params(model: type[models.Model], values: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of _insert_select() for one row (unused ones are simply not sent)."""
    table = model._meta.db_table
    return {
        f"{table}__{name}": json_value(value) if name in _json_fields(model) else value
        for name, value in values.items()
    }


@functools.cache
def _json_fields(model: type[models.Model]) -> frozenset[str]:
    return frozenset(f.attname for f in model._meta.concrete_fields if isinstance(f, models.JSONField))


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field)
    return field


@dataclass(frozen=True)
class _Statement:
    """A statement in PostgreSQL's own `$n` placeholders, and the parameter each stands for: psycopg
    sends it as it is (no client-side parse of ~6 kB on every write; bound_cursor(raw=True))."""

    sql: str
    names: tuple[str, ...]

    @classmethod
    def from_named(cls, sql: str) -> _Statement:
        numbers: dict[str, int] = {}

        def number(match: re.Match[str]) -> str:
            return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

        text = re.sub(r"%\((\w+)\)s", number, " ".join(sql.split()))
        assert "%" not in text, "a literal % in a statement: write it %% before converting"
        return cls(sql=text, names=tuple(numbers))

    def execute(self, cursor: Any, params: Mapping[str, Any]) -> None:
        cursor.execute(self.sql, [params[name] for name in self.names])


# --- A hold or booking on one calendar ---------------------------------------------------------------

# Live reservations and busy blocks near the request, for the alternatives of a refusal: read only
# when the pre-check found the span taken (a CASE evaluates its subquery only when chosen).
_BUSY_NEAR = busy_near_sql(now="now()", params="near_")


@functools.cache
def _reserve_statement(
    commit: bool,
    reservation: tuple[str, ...],
    audit: tuple[str, ...],
    event: tuple[str, ...],
    *,
    queue: bool,
) -> _Statement:
    """The one statement of a hold (or a booking, `commit`) whose rows name these fields; its event's
    payload is made from the row it inserts.

    It writes only if what it read is still so once it holds the calendar's lock: its snapshot is as
    new as the lock (the calendar's version has not moved since), or a fresh look finds the span still
    empty (functions.SPAN_EMPTY_NOW, which PostgreSQL evaluates only when the version moved: its
    re-check of the locked row's newest version). Without `queue`, it takes the lock only if it is
    free, and otherwise waits for the writer to end with a share lock (beside the lock's queue, so a
    herd's losers wake together) and writes nothing; with `queue`, it waits in the lock's queue."""
    computed = {"fencing_token": "l.version", "created_at": "l.now"}
    if commit:
        bump_window_ends_at = "l.now + make_interval(secs => %(bump)s)"
        computed |= {"committed_at": "l.now", "bump_window_ends_at": bump_window_ends_at}
    else:
        computed |= {"expires_at": "l.now + make_interval(secs => %(ttl)s)"}
    # What the write adds, once it holds the lock and the agent's budgets counted it (budgets.py).
    made = _insert_select(Reservation, reservation, computed, source="counted l")
    audited = _insert_select(AuditRecord, audit, {"fencing_token": "l.version"}, source="counted l")
    payload = reservation_event_sql(EventType.BOOKING_COMMITTED if commit else EventType.HOLD_CREATED, "m")
    announced = _insert_select(OutboxEvent, event, {"payload": payload}, source="made m")
    return _Statement.from_named(f"""
WITH pre ({_PRECHECK_COLUMNS}) AS ({PRECHECK_SQL}),
clear AS (
    SELECT %(end)s > pre.now AND %(start)s >= pre.now - make_interval(secs => %(grace)s)
       AND {span_empty(calendar="%(calendar)s")} AS clear
      FROM pre
),
seen AS (SELECT version FROM bookings_calendar WHERE id = %(calendar)s),
lockable AS MATERIALIZED (
    SELECT id FROM bookings_calendar WHERE id = %(calendar)s AND (SELECT clear FROM clear)
       FOR NO KEY UPDATE{"" if queue else " SKIP LOCKED"}
),
locked AS (
    UPDATE bookings_calendar c SET version = c.version + 1
      FROM seen
     WHERE c.id = (SELECT id FROM lockable) AND (c.version = seen.version OR {SPAN_EMPTY_NOW})
    RETURNING c.version, clock_timestamp() AS now, clock_timestamp() - statement_timestamp() AS waited
),
awaited AS (
    SELECT clock_timestamp() - statement_timestamp() AS waited
      FROM (SELECT id FROM bookings_calendar
             WHERE id = %(calendar)s AND (SELECT clear FROM clear) AND NOT EXISTS (SELECT 1 FROM lockable)
               FOR SHARE) AS writer
),
budget AS ({budget_sql(also="EXISTS (SELECT 1 FROM locked)")}),
counted AS (SELECT l.* FROM locked l, budget),
made AS ({made} RETURNING *),
audited AS ({audited}),
announced AS ({announced})
SELECT pre.*, (SELECT clear FROM clear), l.version IS NULL OR EXISTS (SELECT 1 FROM budget),
       l.version, l.now, (SELECT id FROM made), COALESCE(l.waited, (SELECT waited FROM awaited)),
       CASE WHEN pre.blocker_id IS NOT NULL OR pre.upstream_start IS NOT NULL
            THEN (SELECT array_agg(tstzrange(start_time, end_time)) FROM ({_BUSY_NEAR}) AS busy) END
  FROM pre LEFT JOIN locked l ON true
""")


@dataclass
class ReserveOutcome:
    """What the one statement found: `precheck` is the pre-check's row (as PRECHECK_SQL reads it).
    `made` is set when it wrote the hold (its id, fencing token and decision time); otherwise `clear`
    says whether the span was empty (then the lock was busy, and the statement waited for its writer,
    or the snapshot stale: look again) or not (something the caller may take over, or a lapsed hold:
    the general path); an empty span and not `within_budget`: the agent's budgets refused the write
    (budgets.over_budget())."""

    precheck: Sequence[Any]
    clear: bool
    within_budget: bool
    made: tuple[int, int, datetime] | None
    busy_near: list[Span]


def reserve_in_one_statement(
    *,
    calendar: Calendar,
    span: Span,
    priority: int,
    near: Span,
    grace: timedelta,
    ttl_seconds: int | None,
    bump_window_seconds: int,
    agent_public_id: str,
    rows: RowsFor,
    commit: bool,
    budget: Mapping[str, Any],
    queue: bool,
) -> ReserveOutcome:
    """Run the pre-check, and when the span is empty the whole write, in one statement. When another
    write holds the calendar's lock: without `queue`, it writes nothing and answers once that write
    has ended; with `queue`, it waits for the lock (see _reserve_statement())."""
    reservation, audit, event = rows.one(Reservation), rows.one(AuditRecord), rows.one(OutboxEvent)
    statement = _reserve_statement(commit, tuple(reservation), tuple(audit), tuple(event), queue=queue)
    params = {
        **_insert_params(Reservation, reservation),
        **_insert_params(AuditRecord, audit),
        **_insert_params(OutboxEvent, event),
        "calendars": [calendar.pk],
        "calendar": calendar.pk,
        **span_params(span),
        **span_params(near, params="near_"),
        "priority": priority,
        "grace": grace.total_seconds(),
        "ttl": ttl_seconds,
        "bump": bump_window_seconds,
        "calendar_public_id": calendar.public_id,
        "agent_public_id": agent_public_id,
        **budget,
    }
    try:
        with bound_cursor(raw=True) as cursor:
            statement.execute(cursor, params)
            found = cursor.fetchone()
    except IntegrityError as exc:
        # Unreachable while every writer takes the calendar lock (see the module docstring); if it ever
        # happens, the constraint did its job and the caller gets an ordinary conflict.
        if "reservation_no_overlapping_live" in str(exc):
            raise SlotConflict("The span was taken concurrently; re-read availability.") from exc
        raise
    assert found is not None
    precheck, (clear, within_budget, version, now, made_id, waited, busy) = (
        found[:PRECHECK_WIDTH],
        found[PRECHECK_WIDTH:],
    )
    if made_id is not None and not queue:
        observe_lock_wait(timedelta(0))  # taken only if it was free: no wait
    elif waited is not None:  # its turn in the lock's queue, or its wait for the writer in flight
        observe_lock_wait(waited)
    return ReserveOutcome(
        precheck=precheck,
        clear=bool(clear),
        within_budget=bool(within_budget),
        made=(made_id, version, now) if made_id is not None else None,
        busy_near=[Span(r.lower, r.upper) for r in busy or () if r.lower is not None and r.upper is not None],
    )


# --- The commit of a one-calendar hold ---------------------------------------------------------------


# A reservation's columns, as the commit returns the row it moved (and its instance is made from).
_RESERVATION_ATTNAMES = tuple(f.attname for f in Reservation._meta.concrete_fields)


@functools.cache
def _commit_statement(audit: tuple[str, ...], event: tuple[str, ...], *, by_token: bool) -> _Statement:
    """The one statement of a one-calendar hold's commit whose audit and outbox rows name these fields.

    The hold is named by its token (`by_token`: the agent's own commit, which has read nothing), or by
    its row's id and hold id (a commit whose caller read the rows). By token, the statement looks for a
    hold on the request's calendar, of the requesting agent, not waiting for an approval and alone on
    its calendar (else the caller reads the rows and finds out why). The row is named by its id
    once found, not by the hold's id: the plan must not depend on statistics a busy table may not have
    yet (by hold id, without them, the planner scanned every live row).

    A commit needs no look at what is in the way, only a CAS on its own row, which UPDATE re-reads as it
    is once locked whatever the statement's snapshot (so, unlike a hold, it needs no check that its
    snapshot is as new as the lock). The calendar's lock comes first, queued for inside the statement
    (docs/performance-notes.md, "Collisions"), then the rows — the order of every write —, the
    clock is read after the lock, and the version moves only if the hold did: a
    commit that finds its hold gone changes nothing. The audit row and the event are made from the row
    as it moved (a heartbeat may have moved its expiry since any read)."""
    if by_token:
        # The token's row alone first (OFFSET 0: no other condition is pushed into that scan), so the plan
        # is the token's index whatever the table's statistics say; by agent and calendar, the planner
        # without them chose their two indexes, every booking the agent ever made on the calendar.
        target = """SELECT n.id FROM (
                SELECT id, hold_id, is_primary, calendar_id, agent_id, awaiting_approval
                  FROM bookings_reservation WHERE hold_token_hash = %(token_hash)s OFFSET 0) AS n
             WHERE n.is_primary AND n.calendar_id = %(calendar)s AND n.agent_id = %(agent)s
               AND n.awaiting_approval IS NULL
               AND NOT EXISTS (SELECT 1 FROM bookings_reservation o
                                WHERE o.hold_id = n.hold_id AND o.id <> n.id)"""
    else:
        target = "SELECT id FROM bookings_reservation WHERE id = %(row_id)s AND hold_id = %(hold_id)s"
    audited = _insert_select(
        AuditRecord,
        audit,
        {
            "reservation_public_id": "m.booking_id",
            "requested_start": "m.start_time",
            "requested_end": "m.end_time",
            "fencing_token": "m.fencing_token",
            # The caller's details, with the hold's id it did not know.
            "details": f"jsonb_set(%({AuditRecord._meta.db_table}__details)s::jsonb, '{{hold_id}}',"
            " to_jsonb(m.hold_id))",
        },
        source="moved m",
    )
    announced = _insert_select(
        OutboxEvent,
        event,
        {"payload": reservation_event_sql(EventType.BOOKING_COMMITTED, "m")},
        source="moved m",
    )
    return _Statement.from_named(f"""
WITH target AS ({target}),
locked AS (
    SELECT clock_timestamp() AS now, clock_timestamp() - statement_timestamp() AS waited
      FROM (SELECT id FROM bookings_calendar
             WHERE id = %(calendar)s
               AND EXISTS (SELECT 1 FROM bookings_reservation
                            WHERE id = (SELECT id FROM target) AND {live_hold("", now="clock_timestamp()")}
                              AND (awaiting_approval IS NULL OR %(approved)s))
               FOR NO KEY UPDATE) AS calendar
),
budget AS ({budget_sql(also="EXISTS (SELECT 1 FROM locked)")}),
moved AS (
    UPDATE bookings_reservation r
       SET status = 'committed', version = r.version + 1, committed_at = k.now,
           booking_id = 'bk_' || substr(r.hold_id, 5),
           bump_window_ends_at = k.now + make_interval(secs => c.bump_window_seconds)
      FROM locked k, bookings_calendar c
     WHERE r.id = (SELECT id FROM target)
       AND c.id = r.calendar_id AND {live_hold("r", now="k.now")}
       AND (r.awaiting_approval IS NULL OR %(approved)s) AND EXISTS (SELECT 1 FROM budget)
    RETURNING {", ".join(f"r.{name}" for name in _RESERVATION_ATTNAMES)}
),
bumped AS (
    UPDATE bookings_calendar SET version = version + 1
     WHERE id = %(calendar)s AND EXISTS (SELECT 1 FROM moved)
    RETURNING version
),
audited AS ({audited}),
announced AS ({announced})
SELECT k.now IS NULL OR EXISTS (SELECT 1 FROM budget), COALESCE(k.now, clock_timestamp()), k.waited,
       (SELECT version FROM bumped), m.*
  FROM (SELECT 1) AS one LEFT JOIN locked k ON true LEFT JOIN moved m ON true
""")


@dataclass
class CommitOutcome:
    """`now`: the clock the commit decided by; `moved`: the committed row (its calendar and agent not
    loaded), or None: no live hold to commit (none by that token on that calendar of that agent, one
    waiting for approval or on several calendars, or no longer live), or, not `within_budget`, the
    agent's bookings for the day are used up."""

    within_budget: bool
    now: datetime
    moved: Reservation | None


def commit_in_one_statement(
    *,
    calendar: Calendar,
    agent_id: int,
    agent_public_id: str,
    token_hash: str | None = None,
    hold: Reservation | None = None,
    approved: bool,
    rows: RowsFor,
    budget: Mapping[str, Any],
) -> CommitOutcome:
    """Commit a one-calendar hold on `calendar` — the one `token_hash` names, if the agent's and not
    gated; or `hold`, whose owner, token and gate the caller checked on its read — with its audit and
    outbox rows (emit_event_of_a_statement()), in one statement, which queues for the calendar's lock."""
    audit, event = rows.one(AuditRecord), rows.one(OutboxEvent)
    statement = _commit_statement(tuple(audit), tuple(event), by_token=hold is None)
    params = {
        **_insert_params(AuditRecord, audit),
        **_insert_params(OutboxEvent, event),
        "calendar": calendar.pk,
        "agent": agent_id,
        "token_hash": token_hash,
        "row_id": hold.pk if hold is not None else None,
        "hold_id": hold.hold_id if hold is not None else None,
        "approved": approved,
        "calendar_public_id": calendar.public_id,
        "agent_public_id": agent_public_id,
        **budget,
    }
    with bound_cursor(raw=True) as cursor:
        statement.execute(cursor, params)
        found = cursor.fetchone()
    assert found is not None
    (within_budget, now, waited, bumped), values = found[:4], found[4:]
    if waited is not None:
        observe_lock_wait(waited)
    moved = None if values[0] is None else loaded(Reservation, _RESERVATION_ATTNAMES, values)
    assert (bumped is None) == (moved is None)  # the calendar's version moved iff the hold did
    return CommitOutcome(within_budget=bool(within_budget), now=now, moved=moved)
