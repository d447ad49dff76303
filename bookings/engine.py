"""The booking engine: every write to calendars and reservations goes through these functions.

How a write stays race-safe (see README, "How AgentCal decides"):

1. Cheap checks that need no lock: the span's shape (422 `booking_too_long`), the caller's allowed
   priority, and an unlocked look for a blocker the caller could never take over. That look is only
   an optimisation, so losers of a herd learn they lost without queueing; it decides nothing.
2. One transaction that first takes the row lock of every calendar it will touch, in id order, with
   `UPDATE calendar SET version = version + 1 RETURNING version, clock_timestamp()`. The lock
   serialises writers per calendar (concurrent inserts guarded only by the exclusion constraint
   deadlock under a herd), the new version is the fencing token, and the timestamp read *after* the
   lock is the "now" every decision in the transaction uses: the database's clock, never the web
   worker's.
3. Inside it: lapsed holds are expired lazily, takeovers are checked (strictly higher priority; live
   holds, or commits inside their bump window) and applied as status-checked CAS updates, and the new
   rows are inserted. The exclusion constraint `reservation_no_overlapping_live` is the guarantee:
   if any of the above were wrong, the INSERT would fail rather than double-book.
4. The audit row is written in the same transaction; a rejection is audited in its own transaction
   after the rollback (`_audit_rejections`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Now
from psycopg.errors import LockNotAvailable

from agentcal.db import InsertBatch, bound_cursor
from agentcal.errors import (
    AgentCalError,
    BookingNotLive,
    BookingTooLong,
    HoldAlreadyCommitted,
    HoldAwaitingApproval,
    HoldEvicted,
    HoldExpired,
    HoldReleased,
    HoldTokenMismatch,
    InvalidRange,
    NotFound,
    NotOwner,
    PreconditionFailed,
    PriorityNotAllowed,
    SlotConflict,
    StaleFencingToken,
)
from agentcal.ids import new_public_id
from agentcal.metrics import HOLD_EXPIRIES, WRITE_SECONDS
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.events import emit_reservation_event
from bookings.models import MAX_RESERVATION_LENGTH, Calendar, Reservation, ReservationStatus
from bookings.selectors import (
    RESERVATION_ROW_COLUMNS,
    RESERVATION_ROW_JOINS,
    reservation_group,
    reservation_rows_from,
    server_now,
)
from bookings.spans import (
    MAX_BUCKETS,
    BusyIndex,
    Span,
    bucket_label,
    buckets_touched,
    isoformat_z,
    nearest_free,
)
from webhooks.models import EventType
from workspaces.actor import Actor
from workspaces.models import Agent

P = ParamSpec("P")
R = TypeVar("R")

# How far into the past a span may start (clock skew between an agent and the database).
PAST_START_GRACE = timedelta(seconds=60)
ALTERNATIVES_COUNT = 3
# Alternatives are searched this many slots either side of the request (a week of 30-minute slots).
ALTERNATIVES_MAX_STEPS = 336
# A takeover whose victim spans calendars outside the locked set retries with the larger set.
MAX_LOCK_EXPANSIONS = 3


# --- Results ------------------------------------------------------------------------------------------


@dataclass
class ReservationGroup:
    """A hold or booking: one row per calendar, primary row first."""

    rows: list[Reservation]
    hold_token: str | None = None  # only right after creation; never stored raw
    displaced: list[Reservation] = field(default_factory=list)

    @property
    def primary(self) -> Reservation:
        return self.rows[0]


def _ordered(rows: Iterable[Reservation]) -> list[Reservation]:
    return sorted(rows, key=lambda r: (not r.is_primary, r.calendar_id))


# --- Rejection auditing -------------------------------------------------------------------------------


def _audit_rejections(event: AuditEvent) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Audit a domain error raised by an engine operation, after its transaction rolled back."""

    def decorate(operation: Callable[P, R]) -> Callable[P, R]:
        timer = WRITE_SECONDS.labels(operation.__name__)

        @functools.wraps(operation)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with timer.time():
                try:
                    return operation(*args, **kwargs)
                except AgentCalError as exc:
                    if not exc.audited:
                        _audit_rejection(event, exc, kwargs)
                    raise

        return wrapper

    return decorate


def _audit_rejection(event: AuditEvent, exc: AgentCalError, kwargs: dict[str, Any]) -> None:
    actor: Actor = kwargs["actor"]
    calendar = kwargs.get("calendar")
    span = kwargs.get("span")
    # One INSERT after the rollback; in autocommit it is its own transaction (no BEGIN/COMMIT).
    batch = InsertBatch()
    audit_record(
        event_type=event,
        outcome=Outcome.REJECTED,
        actor=actor,
        batch=batch,
        calendar_public_id=calendar.public_id if isinstance(calendar, Calendar) else "",
        reservation_public_id=str(kwargs.get("hold_id") or kwargs.get("booking_id") or ""),
        requested_start=span.start if isinstance(span, Span) else None,
        requested_end=span.end if isinstance(span, Span) else None,
        http_status=exc.status,
        failure_reason=exc.code,
        conflict_details=_conflict_details(exc),
    )
    batch.execute()
    exc.audited = True


def _audit_reservation(
    event_type: AuditEvent,
    *,
    actor: Actor | None,
    row: Reservation,
    reservation_public_id: str,
    details: dict[str, Any] | None = None,
    batch: InsertBatch | None = None,
) -> None:
    """Audit a successful change to one hold or booking, described by its primary row."""
    audit_record(
        event_type=event_type,
        outcome=Outcome.SUCCESS,
        actor=actor,
        batch=batch,
        workspace_id=row.calendar.workspace_id,
        calendar_public_id=row.calendar.public_id,
        reservation_public_id=reservation_public_id,
        requested_start=row.start_time,
        requested_end=row.end_time,
        fencing_token=row.fencing_token,
        details=details,
    )


def _conflict_details(exc: AgentCalError) -> dict[str, Any] | None:
    keys = (
        "conflicting",
        "conflicting_bucket",
        "held_by_priority",
        "caller_priority",
        "alternatives",
        "current_version",
        "max_allowed_minutes",
        "requested_minutes",
        "current_fencing_token",
    )
    details = {k: exc.extra[k] for k in keys if k in exc.extra}
    return details or None


# --- Calendars ------------------------------------------------------------------------------------------


@transaction.atomic(durable=True)
def calendar_create(*, actor: Actor, name: str, **settings: Any) -> Calendar:
    calendar = Calendar.objects.create(workspace=actor.workspace, name=name, **settings)
    audit_record(
        event_type=AuditEvent.CALENDAR_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        calendar_public_id=calendar.public_id,
        details={"name": name, **settings},
    )
    return calendar


@transaction.atomic(durable=True)
def calendar_update(*, actor: Actor, calendar: Calendar, changes: dict[str, Any]) -> Calendar:
    # Settings apply to future writes only: a commit keeps the bump window it was given.
    for name, value in changes.items():
        setattr(calendar, name, value)
    calendar.save(update_fields=[*changes, "updated_at"])
    audit_record(
        event_type=AuditEvent.CALENDAR_UPDATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        calendar_public_id=calendar.public_id,
        details={"changes": changes},
    )
    return calendar


# --- Creating holds and bookings ----------------------------------------------------------------------------


@_audit_rejections(AuditEvent.HOLD_REJECTED)
def hold_create(
    *,
    actor: Actor,
    calendar: Calendar,
    span: Span,
    priority: int | None = None,
    ttl_seconds: int | None = None,
    also_calendars: Sequence[Calendar] = (),
    if_match: int | None = None,
    title: str = "",
    attendees: list[Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> ReservationGroup:
    """Phase 1: a soft hold that blocks the span until it expires, is committed, released or evicted."""
    return _reserve(
        actor=actor,
        calendar=calendar,
        span=span,
        priority=priority,
        ttl_seconds=ttl_seconds,
        commit=False,
        also_calendars=also_calendars,
        if_match=if_match,
        title=title,
        attendees=attendees or [],
        metadata=metadata or {},
    )


@_audit_rejections(AuditEvent.COMMIT_REJECTED)
def booking_create(
    *,
    actor: Actor,
    calendar: Calendar,
    span: Span,
    priority: int | None = None,
    also_calendars: Sequence[Calendar] = (),
    if_match: int | None = None,
    title: str = "",
    attendees: list[Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> ReservationGroup:
    """Single-step atomic hold + commit."""
    return _reserve(
        actor=actor,
        calendar=calendar,
        span=span,
        priority=priority,
        ttl_seconds=None,
        commit=True,
        also_calendars=also_calendars,
        if_match=if_match,
        title=title,
        attendees=attendees or [],
        metadata=metadata or {},
    )


def _reserve(
    *,
    actor: Actor,
    calendar: Calendar,
    span: Span,
    priority: int | None,
    ttl_seconds: int | None,
    commit: bool,
    also_calendars: Sequence[Calendar],
    if_match: int | None,
    title: str,
    attendees: list[Any],
    metadata: dict[str, Any],
) -> ReservationGroup:
    assert actor.agent is not None
    calendars = _distinct_calendars(calendar, also_calendars)
    _check_span_length(span, calendars)
    if priority is None:
        priority = actor.agent.priority
    elif priority > actor.agent.max_priority:
        raise PriorityNotAllowed(
            f"Priority {priority} is above this agent's maximum of {actor.agent.max_priority}.",
            max_priority=actor.agent.max_priority,
            requested_priority=priority,
        )
    now = None
    try:
        # Cheap, unlocked pre-check: never trusted for correctness, only to let losers fail fast.
        now = _precheck(calendars, span, priority)
        lock_ids = sorted(c.pk for c in calendars)
        nowait = True
        for _ in range(MAX_LOCK_EXPANSIONS):
            try:
                return _reserve_locked(
                    actor=actor,
                    calendars=calendars,
                    lock_ids=lock_ids,
                    nowait=nowait,
                    span=span,
                    priority=priority,
                    ttl_seconds=ttl_seconds,
                    commit=commit,
                    if_match=if_match,
                    title=title,
                    attendees=attendees,
                    metadata=metadata,
                )
            except _CalendarBusy:
                # Another write on these calendars is in flight, maybe for this very span (a herd). Wait
                # for it to end, then look again without the lock: if it took the span, this request
                # loses now, at the same moment as every other loser, instead of each loser taking the
                # lock in turn (and delaying unrelated writes to the calendar). Otherwise, queue for it.
                _await_writers(lock_ids)
                now = _precheck(calendars, span, priority)
                nowait = False
            except _NeedMoreLocks as more:
                lock_ids = sorted({*lock_ids, *more.calendar_ids})
                nowait = False
        raise SlotConflict("The reservations in the way kept changing; re-read availability and retry.")
    except _Blocked as blocked:
        # Found by the pre-check, with the database's now of that look: no lock was taken.
        blocked.conflict.extra["alternatives"] = _alternatives(calendars, span, now=blocked.checked_at)
        raise blocked.conflict from None
    except SlotConflict as conflict:
        conflict.extra["alternatives"] = _alternatives(calendars, span, now=now)
        raise


class _NeedMoreLocks(Exception):
    def __init__(self, calendar_ids: set[int]) -> None:
        self.calendar_ids = calendar_ids


def _distinct_calendars(calendar: Calendar, also: Sequence[Calendar]) -> list[Calendar]:
    seen = {calendar.pk: calendar}
    for other in also:
        seen.setdefault(other.pk, other)
    return list(seen.values())


def _check_span_length(span: Span, calendars: Sequence[Calendar]) -> None:
    if span.end <= span.start:
        raise InvalidRange("end_time must be after start_time.")
    for cal in calendars:
        buckets = buckets_touched(span, cal.slot_minutes)
        if span.minutes > cal.max_booking_minutes or buckets > MAX_BUCKETS:
            raise BookingTooLong(
                f"{span.minutes} minutes is more than calendar {cal.public_id} allows.",
                calendar=cal.public_id,
                max_allowed_minutes=min(cal.max_booking_minutes, MAX_BUCKETS * cal.slot_minutes),
                requested_minutes=span.minutes,
                max_buckets_allowed=MAX_BUCKETS,
            )


def _may_take_over(row: Reservation, *, priority: int, now: datetime) -> bool:
    """A request of `priority` may take over `row` only with a strictly greater priority (ties keep the
    first writer, so two equal agents cannot ping-pong a slot), and only a live hold or a commit still
    inside its bump window. _PRECHECK_SQL states the same rule in SQL."""
    return row.priority < priority and (
        row.status == ReservationStatus.HELD
        or (row.bump_window_ends_at is not None and row.bump_window_ends_at > now)
    )


# The pre-check in one round trip: the database's now, and the first live reservation in the way
# that the caller could not take over (not lapsed, and not what _may_take_over allows), with what a 409
# says about it. Hand-written because it runs before every write and the ORM's compile time exceeded
# the query's; one statement, so the blocker it describes is the one it found (no second read).
_PRECHECK_SQL = """
SELECT now(), b.id, b.status, b.priority, b.start_time, b.end_time, b.expires_at, b.bump_window_ends_at,
       b.calendar_id, b.cal_public_id, b.slot_minutes, b.agent_id, b.agent_public_id
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (
      SELECT r.id, r.status, r.priority, r.start_time, r.end_time, r.expires_at, r.bump_window_ends_at,
             r.calendar_id, c.public_id AS cal_public_id, c.slot_minutes, r.agent_id,
             a.public_id AS agent_public_id
        FROM bookings_reservation r
        JOIN bookings_calendar c ON c.id = r.calendar_id
        JOIN workspaces_agent a ON a.id = r.agent_id
       WHERE r.calendar_id = ANY(%(calendars)s) AND r.status IN ('held', 'committed')
         AND r.start_time < %(end)s AND r.start_time > %(earliest)s AND r.end_time > %(start)s
         AND NOT (r.status = 'held' AND r.expires_at <= now())
         AND NOT (r.priority < %(priority)s AND (r.status = 'held' OR r.bump_window_ends_at > now()))
       ORDER BY r.start_time
       LIMIT 1
  ) AS b ON true
"""


def _overlap_params(calendar_ids: Iterable[int], span: Span, **more: Any) -> dict[str, Any]:
    """Parameters of the overlap conditions the hand-written statements share: live rows on the
    calendars with start_time < end AND end_time > start, and start_time > start - 7 days so that the
    (calendar_id, start_time) index reads a bounded window instead of the calendar's history."""
    return {
        "calendars": list(calendar_ids),
        "start": span.start,
        "end": span.end,
        "earliest": span.start - MAX_RESERVATION_LENGTH,
        **more,
    }


class _Blocked(Exception):
    """The pre-check's conflict, with the database's now when it looked (for the alternatives)."""

    def __init__(self, conflict: SlotConflict, checked_at: datetime) -> None:
        self.conflict, self.checked_at = conflict, checked_at


def _precheck(calendars: Sequence[Calendar], span: Span, priority: int) -> datetime:
    """Refuse what is certainly refused without taking a lock (_Blocked); returns the database's now."""
    with bound_cursor() as cursor:
        cursor.execute(_PRECHECK_SQL, _overlap_params([c.pk for c in calendars], span, priority=priority))
        found = cursor.fetchone()
    assert found is not None  # one row always: SELECT … FROM (SELECT 1) LEFT JOIN
    now, blocker_id, *blocker = found
    if span.end <= now or span.start < now - PAST_START_GRACE:
        raise InvalidRange("The span is in the past by the server's clock.", server_time=isoformat_z(now))
    if blocker_id is not None:
        raise _Blocked(_slot_conflict(_blocker_row(blocker_id, *blocker), span, priority), now)
    return now


def _blocker_row(
    row_id: int,
    status: str,
    priority: int,
    start: datetime,
    end: datetime,
    expires_at: datetime | None,
    bump_window_ends_at: datetime | None,
    calendar_id: int,
    calendar_public_id: str,
    slot_minutes: int,
    agent_id: int,
    agent_public_id: str,
) -> Reservation:
    """The pre-check's blocker as an (unsaved) row with what _slot_conflict reads."""
    return Reservation(
        id=row_id,
        status=status,
        priority=priority,
        start_time=start,
        end_time=end,
        expires_at=expires_at,
        bump_window_ends_at=bump_window_ends_at,
        calendar=Calendar(id=calendar_id, public_id=calendar_public_id, slot_minutes=slot_minutes),
        agent=Agent(id=agent_id, public_id=agent_public_id),
    )


def _slot_conflict(blocker: Reservation, span: Span, caller_priority: int) -> SlotConflict:
    conflicting: dict[str, Any] = {
        "calendar": blocker.calendar.public_id,
        "start_time": isoformat_z(blocker.start_time),
        "end_time": isoformat_z(blocker.end_time),
        "status": blocker.status,
        "priority": blocker.priority,
        "agent_id": blocker.agent.public_id,
    }
    if blocker.status == ReservationStatus.HELD and blocker.expires_at is not None:
        conflicting["expires_at"] = isoformat_z(blocker.expires_at)
    elif blocker.bump_window_ends_at is not None:
        conflicting["bump_window_ends_at"] = isoformat_z(blocker.bump_window_ends_at)
    frozen = blocker.status == ReservationStatus.COMMITTED and blocker.priority < caller_priority
    reason = "a frozen booking (past its bump window)" if frozen else f"priority {blocker.priority}"
    return SlotConflict(
        f"The span overlaps a {blocker.status} reservation held at {reason}; "
        f"taking it over needs a strictly higher priority than {blocker.priority}"
        + (" and is no longer possible." if frozen else "."),
        conflicting_bucket=bucket_label(max(span.start, blocker.start_time), blocker.calendar.slot_minutes),
        conflicting=conflicting,
        held_by_priority=blocker.priority,
        caller_priority=caller_priority,
        retryable=False,
    )


class _CalendarBusy(Exception):
    """Another write holds one of the calendars' locks right now (raised only with `nowait`)."""


def _lock_calendars(
    lock_ids: Sequence[int], *, if_match: tuple[int, int] | None = None, nowait: bool = False
) -> tuple[datetime, dict[int, int]]:
    """Take the calendars' row locks in id order and bump their versions.

    Returns the database time read after the last lock was granted, and each calendar's new version.
    `if_match` is (calendar id, expected version): that calendar must still be at that version.
    `nowait`: raise _CalendarBusy instead of queueing when another transaction holds a lock.
    """
    versions: dict[int, int] = {}
    now: datetime | None = None
    target = (
        "(SELECT id FROM bookings_calendar WHERE id = %(id)s FOR NO KEY UPDATE NOWAIT)"
        if nowait
        else "%(id)s"
    )
    with bound_cursor() as cursor:
        for cal_id in lock_ids:
            matching = if_match is not None and if_match[0] == cal_id
            try:
                cursor.execute(
                    f"UPDATE bookings_calendar SET version = version + 1 WHERE id = {target}"
                    + (" AND version = %(version)s" if matching else "")
                    + " RETURNING version, clock_timestamp()",
                    {"id": cal_id, "version": if_match[1] if if_match is not None else None},
                )
            except LockNotAvailable as exc:  # inside bound_cursor(): psycopg's error, not yet Django's
                raise _CalendarBusy from exc
            row = cursor.fetchone()
            if row is None and matching:
                assert if_match is not None
                current = Calendar.objects.filter(pk=cal_id).values_list("version", flat=True).first()
                raise PreconditionFailed(
                    f"If-Match expected version {if_match[1]}; the calendar is at {current}.",
                    current_version=current,
                )
            if row is None:
                raise NotFound("The calendar no longer exists.")
            versions[cal_id], now = row
    assert now is not None
    return now, versions


def _await_writers(calendar_ids: Sequence[int]) -> None:
    """Wait until the writes in flight on these calendars have ended, without taking their place: a
    share lock conflicts with a writer's lock but not with other share locks, and in autocommit it is
    released as soon as it is granted. Every waiter wakes at once when the writer commits."""
    with bound_cursor() as cursor:
        cursor.execute(
            "SELECT id FROM bookings_calendar WHERE id = ANY(%(ids)s) ORDER BY id FOR SHARE",
            {"ids": list(calendar_ids)},
        )


# Whole groups of lapsed holds overlapping the span (or anywhere on the calendars, for the sweep) move
# to 'expired': row locks taken in id order (like _transition_group), status re-checked after the lock.
# As a CTE `expired` whose rows the statement reads back with their calendar and agent.
_EXPIRE_LAPSED_CTE = """
WITH expired AS (
    UPDATE bookings_reservation SET status = 'expired', version = version + 1, ended_at = %(now)s
     WHERE id IN (SELECT id FROM bookings_reservation
                   WHERE hold_id IN (SELECT hold_id FROM bookings_reservation
                                      WHERE calendar_id = ANY(%(calendars)s) AND status = 'held'
                                        AND expires_at <= %(now)s {overlapping})
                     AND status = 'held' AND expires_at <= %(now)s
                   ORDER BY id FOR UPDATE)
       AND status = 'held'
    RETURNING *)
"""
_OVERLAPPING = "AND start_time < %(end)s AND start_time > %(earliest)s AND end_time > %(start)s"

# The sweep: every lapsed hold on the calendars.
_EXPIRE_LAPSED_SQL = (
    _EXPIRE_LAPSED_CTE.format(overlapping="")
    + f"SELECT {RESERVATION_ROW_COLUMNS} FROM expired r {RESERVATION_ROW_JOINS}"
)

# The write path's look under the lock, in one round trip: expire the lapsed holds in the span, and
# read the live rows in the way (whole rows, with calendar and agent, for a 409 or a takeover). Both
# parts read the statement's one snapshot, taken after the lock was granted, so the look-up leaves out
# exactly the lapsed rows the UPDATE expires (the lapsed set cannot change meanwhile: extending a hold
# needs it unexpired, and every other change needs the lock we hold).
_CLEAR_THE_WAY_SQL = (
    _EXPIRE_LAPSED_CTE.format(overlapping=_OVERLAPPING)
    + f"""
SELECT true, {RESERVATION_ROW_COLUMNS} FROM expired r {RESERVATION_ROW_JOINS}
UNION ALL
SELECT false, {RESERVATION_ROW_COLUMNS} FROM bookings_reservation r {RESERVATION_ROW_JOINS}
 WHERE r.calendar_id = ANY(%(calendars)s) AND r.status IN ('held', 'committed')
   AND r.start_time < %(end)s AND r.start_time > %(earliest)s AND r.end_time > %(start)s
   AND NOT (r.status = 'held' AND r.expires_at <= %(now)s)
"""
)


def _clear_the_way(
    *, calendar_ids: Sequence[int], span: Span, now: datetime, batch: InsertBatch
) -> list[Reservation]:
    """Expire the lapsed holds in the span (so they never block the write at hand) and return the live
    rows in its way, start order. Usually both are empty: one round trip either way."""
    with bound_cursor() as cursor:
        cursor.execute(_CLEAR_THE_WAY_SQL, _overlap_params(calendar_ids, span, now=now))
        found = cursor.fetchall()
    if not found:
        return []
    _announce_expired(reservation_rows_from(row[1:] for row in found if row[0]), lazily=True, batch=batch)
    in_the_way = reservation_rows_from(row[1:] for row in found if not row[0])
    return sorted(in_the_way, key=lambda r: r.start_time)


def _expire_lapsed_holds(*, calendar_ids: Sequence[int], now: datetime) -> list[Reservation]:
    """The sweep's expiry: every lapsed hold on the calendars (the caller holds their locks)."""
    with bound_cursor() as cursor:
        cursor.execute(_EXPIRE_LAPSED_SQL, {"calendars": list(calendar_ids), "now": now})
        expired = reservation_rows_from(cursor.fetchall())
    _announce_expired(expired, lazily=False)
    return expired


def _announce_expired(expired: list[Reservation], *, lazily: bool, batch: InsertBatch | None = None) -> None:
    """Audit and announce holds just expired (time did it, not the request that noticed)."""
    for rows in _groups(expired):
        head = rows[0]
        _audit_reservation(
            AuditEvent.HOLD_EXPIRED,
            actor=None,
            row=head,
            reservation_public_id=head.hold_id,
            details={"expires_at": isoformat_z(head.expires_at), "expired_lazily": lazily},  # type: ignore[arg-type]
            batch=batch,
        )
        emit_reservation_event(EventType.HOLD_EXPIRED, rows, batch=batch)
        transaction.on_commit(HOLD_EXPIRIES.labels("lazy" if lazily else "sweep").inc)


def _groups(rows: Iterable[Reservation]) -> list[list[Reservation]]:
    """Rows of several holds/bookings, grouped per hold, each group primary first."""
    by_hold: dict[str, list[Reservation]] = {}
    for row in rows:
        by_hold.setdefault(row.hold_id, []).append(row)
    return [_ordered(group) for _, group in sorted(by_hold.items())]


def holds_expire_lapsed(limit: int = 100) -> int:
    """The background sweep: expire lapsed holds nobody has written over, calendar by calendar.

    Only for the state people and agents see, and for `hold.expired` events: writes never wait for it.
    Safe on several workers at once: each calendar is handled under its lock and each hold moves by
    CAS, so a hold is expired (and audited, and announced) exactly once.
    """
    calendar_ids = list(
        Reservation.objects.filter(status=ReservationStatus.HELD, expires_at__lte=Now())
        .values_list("calendar_id", flat=True)
        .distinct()[:limit]
    )
    expired = 0
    for calendar_id in calendar_ids:
        with transaction.atomic(durable=True):
            now, _ = _lock_calendars([calendar_id])
            rows = _expire_lapsed_holds(calendar_ids=[calendar_id], now=now)
            expired += len(_groups(rows))
    return expired


# CAS on one whole hold or booking: lock its rows in id order (two transactions touching the rows of
# one multi-calendar group then cannot deadlock), re-check the status after the lock, move the rows and
# read them back with their calendar and agent, in one statement. A row another transaction moved first
# is simply not returned; callers compare what came back with what they need.
_TRANSITION_SQL = (
    """
WITH moved AS (
    UPDATE bookings_reservation SET status = %(to_status)s, version = version + 1, ended_at = %(now)s
     WHERE id IN (SELECT id FROM bookings_reservation
                   WHERE {column} = %(key)s AND status = %(from_status)s {unexpired}
                   ORDER BY id FOR UPDATE)
       AND status = %(from_status)s
    RETURNING *)
"""
    + f"SELECT {RESERVATION_ROW_COLUMNS} FROM moved r {RESERVATION_ROW_JOINS}"
)


def _transition_group(
    *,
    hold_id: str | None = None,
    booking_id: str | None = None,
    from_status: str,
    to_status: str,
    now: datetime,
    unexpired: bool = False,
) -> list[Reservation]:
    """Move the rows of one hold (or booking) from `from_status` to `to_status`; with `unexpired`,
    only rows whose hold has not lapsed by `now`. Returns the rows it moved, primary first."""
    column, key = ("hold_id", hold_id) if hold_id is not None else ("booking_id", booking_id)
    sql = _TRANSITION_SQL.format(column=column, unexpired="AND expires_at > %(now)s" if unexpired else "")
    with bound_cursor() as cursor:
        cursor.execute(sql, {"key": key, "from_status": from_status, "to_status": to_status, "now": now})
        return _ordered(reservation_rows_from(cursor.fetchall()))


def _reserve_locked(
    *,
    actor: Actor,
    calendars: Sequence[Calendar],
    lock_ids: Sequence[int],
    nowait: bool,
    span: Span,
    priority: int,
    ttl_seconds: int | None,
    commit: bool,
    if_match: int | None,
    title: str,
    attendees: list[Any],
    metadata: dict[str, Any],
) -> ReservationGroup:
    primary = calendars[0]
    calendar_ids = [c.pk for c in calendars]
    # The rows this write adds (reservation, audit, outbox) go to the database together, at the end.
    batch = InsertBatch()
    with transaction.atomic(durable=True):
        now, versions = _lock_calendars(
            lock_ids, if_match=(primary.pk, if_match) if if_match is not None else None, nowait=nowait
        )
        in_the_way = _clear_the_way(calendar_ids=calendar_ids, span=span, now=now, batch=batch)
        for row in in_the_way:
            if not _may_take_over(row, priority=priority, now=now):
                raise _slot_conflict(row, span, priority)

        victim_groups = {row.hold_id for row in in_the_way}
        if victim_groups:
            # A victim that also holds other calendars is taken off them too (a hold is all-or-nothing),
            # which changes those calendars' state: their locks are needed, in order, so start over.
            victim_calendar_ids = set(
                Reservation.objects.filter(hold_id__in=victim_groups).values_list("calendar_id", flat=True)
            )
            if not victim_calendar_ids <= set(lock_ids):
                raise _NeedMoreLocks(victim_calendar_ids)
        displaced = _displace(victim_groups, in_the_way, now=now)

        group = _new_group(
            actor=actor,
            calendars=calendars,
            versions=versions,
            span=span,
            priority=priority,
            ttl_seconds=ttl_seconds,
            commit=commit,
            now=now,
            title=title,
            attendees=attendees,
            metadata=metadata,
            batch=batch,
        )
        group.displaced = displaced

        head = group.primary
        audit_record(
            event_type=AuditEvent.COMMIT_CREATED if commit else AuditEvent.HOLD_CREATED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            batch=batch,
            calendar_public_id=primary.public_id,
            reservation_public_id=head.booking_id if commit else head.hold_id,  # type: ignore[arg-type]
            requested_start=span.start,
            requested_end=span.end,
            fencing_token=head.fencing_token,
            details={
                "priority": priority,
                "also_calendars": [c.public_id for c in calendars[1:]],
                "displaced": sorted({r.booking_id or r.hold_id for r in displaced if r.is_primary}),
            },
        )
        emit_reservation_event(
            EventType.BOOKING_COMMITTED if commit else EventType.HOLD_CREATED, group.rows, batch=batch
        )
        for victim_rows in _groups(displaced):
            _announce_displacement(victim_rows, by=head, actor=actor, batch=batch)
        _insert_group(group, batch)
        if displaced:
            Reservation.objects.filter(pk__in=[r.pk for r in displaced]).update(displaced_by=group.primary)
    return group


def _displace(victim_groups: set[str], in_the_way: list[Reservation], *, now: datetime) -> list[Reservation]:
    """Evict the live holds and bump the commits in the way (whole groups), CAS-checked."""
    displaced: list[Reservation] = []
    for hold_id in sorted(victim_groups):
        status = next(r.status for r in in_the_way if r.hold_id == hold_id)
        to_status = (
            ReservationStatus.EVICTED if status == ReservationStatus.HELD else ReservationStatus.BUMPED
        )
        group_size = Reservation.objects.filter(hold_id=hold_id).count()
        moved = _transition_group(hold_id=hold_id, from_status=status, to_status=to_status, now=now)
        if len(moved) != group_size:
            # Someone changed the victim between our read and our update (cannot happen while we hold
            # every calendar lock involved, but the CAS is what we trust, not that reasoning).
            raise SlotConflict(
                "A reservation in the way changed concurrently; re-read and retry.", retryable=True
            )
        displaced.extend(moved)
    return displaced


def _announce_displacement(
    victim_rows: list[Reservation], *, by: Reservation, actor: Actor, batch: InsertBatch
) -> None:
    """Audit the eviction/bump and tell the victim's agent, with alternatives computed right here,
    in the evicting transaction, so they already account for the reservation that displaced it."""
    victim = victim_rows[0]
    bumped = victim.status == ReservationStatus.BUMPED
    audit_record(
        event_type=AuditEvent.BOOKING_BUMPED if bumped else AuditEvent.HOLD_EVICTED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        batch=batch,
        calendar_public_id=victim.calendar.public_id,
        reservation_public_id=(victim.booking_id if bumped else victim.hold_id) or victim.hold_id,
        requested_start=victim.start_time,
        requested_end=victim.end_time,
        fencing_token=victim.fencing_token,
        details={
            "victim_agent_id": victim.agent.public_id,
            "victim_priority": victim.priority,
            "displaced_by": by.booking_id or by.hold_id,
            "displaced_by_priority": by.priority,
        },
    )
    emit_reservation_event(
        EventType.BOOKING_BUMPED if bumped else EventType.HOLD_EVICTED,
        victim_rows,
        displaced_by={
            "id": by.booking_id or by.hold_id,
            "agent_id": by.agent.public_id,
            "priority": by.priority,
        },
        alternatives=_alternatives(
            [r.calendar for r in victim_rows], Span(victim.start_time, victim.end_time), now=by.created_at
        ),
        batch=batch,
    )


def _hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _new_group(
    *,
    actor: Actor,
    calendars: Sequence[Calendar],
    versions: dict[int, int],
    span: Span,
    priority: int,
    ttl_seconds: int | None,
    commit: bool,
    now: datetime,
    title: str,
    attendees: list[Any],
    metadata: dict[str, Any],
    batch: InsertBatch,
) -> ReservationGroup:
    """The new hold or booking's rows, queued in `batch` (written by _insert_group)."""
    suffix = new_public_id("hld").removeprefix("hld_")  # the booking id reuses it: hld_X -> bk_X
    hold_token = None if commit else "hlt_" + secrets.token_urlsafe(24)
    primary = calendars[0]
    ttl = timedelta(seconds=ttl_seconds or primary.hold_ttl_seconds)
    rows = [
        Reservation(
            hold_id=f"hld_{suffix}",
            booking_id=f"bk_{suffix}" if commit else None,
            calendar=cal,
            agent=actor.agent,
            is_primary=cal.pk == primary.pk,
            status=ReservationStatus.COMMITTED if commit else ReservationStatus.HELD,
            priority=priority,
            start_time=span.start,
            end_time=span.end,
            hold_token_hash=_hash_token(hold_token) if hold_token else None,
            fencing_token=versions[cal.pk],
            title=title,
            attendees=attendees,
            metadata=metadata,
            created_at=now,  # the decision's time (the lock's clock), not the transaction's start
            expires_at=None if commit else now + ttl,
            committed_at=now if commit else None,
            bump_window_ends_at=now + timedelta(seconds=cal.bump_window_seconds) if commit else None,
        )
        for cal in calendars
    ]
    group = ReservationGroup(rows=_ordered(rows), hold_token=hold_token)
    for row in group.rows:
        batch.add(Reservation, {f.attname: getattr(row, f.attname) for f in _RESERVATION_INSERT_FIELDS})
    return group


_RESERVATION_INSERT_FIELDS = [f for f in Reservation._meta.concrete_fields if not f.primary_key]


def _insert_group(group: ReservationGroup, batch: InsertBatch) -> None:
    """Write the batch (the new rows, their audit and outbox rows) in one statement; ids come back in
    the order the rows were queued, which is the group's order."""
    try:
        ids = batch.execute(returning=Reservation)
    except IntegrityError as exc:
        # Unreachable while every writer takes the calendar lock; if it ever happens, the constraint
        # did its job and the caller gets an ordinary conflict instead of a double booking.
        if "reservation_no_overlapping_live" in str(exc):
            raise SlotConflict("The span was taken concurrently; re-read availability.") from exc
        raise
    for row, row_id in zip(group.rows, ids, strict=True):
        row.pk = row_id
        row._state.adding = False


# --- Acting on an existing hold or booking ---------------------------------------------------------------


def _owned_hold(*, actor: Actor, hold_id: str, hold_token: str) -> list[Reservation]:
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    head = rows[0]
    _refuse_unless_owner(actor, head)
    if head.hold_token_hash is None or not hmac.compare_digest(head.hold_token_hash, _hash_token(hold_token)):
        raise HoldTokenMismatch("The hold_token does not belong to this hold.")
    _refuse_if_gated(head)
    return rows


def _refuse_unless_owner(actor: Actor, head: Reservation) -> None:
    # Holding the hold_token is not enough: it travels through agent frameworks, logs and approvals,
    # and one agent must not be able to end or prolong another's reservation with it.
    if actor.agent is None or head.agent_id != actor.agent.pk:
        what = "hold" if head.booking_id is None else "booking"
        raise NotOwner(f"Only the agent that made this {what} may change it.")


def _refuse_if_gated(head: Reservation) -> None:
    if head.awaiting_approval and head.status == ReservationStatus.HELD:
        raise HoldAwaitingApproval(
            f"Hold {head.hold_id} waits for approval {head.awaiting_approval}; its decision commits or "
            "releases it (cancel the approval to let go of the hold).",
            hold_id=head.hold_id,
            approval_id=head.awaiting_approval,
        )


def _raise_not_live(head: Reservation, now: datetime) -> None:
    """Explain why a hold can no longer be acted on; return if it is live."""
    status = head.status
    if status == ReservationStatus.HELD and head.expires_at is not None and head.expires_at <= now:
        status = ReservationStatus.EXPIRED
    common = {"hold_id": head.hold_id, "hold_status": status}
    if status == ReservationStatus.EXPIRED:
        raise HoldExpired(f"Hold {head.hold_id} expired at {isoformat_z(head.expires_at)}.", **common)  # type: ignore[arg-type]
    if status == ReservationStatus.EVICTED:
        raise HoldEvicted(f"Hold {head.hold_id} was evicted by a higher-priority request.", **common)
    if status == ReservationStatus.RELEASED:
        raise HoldReleased(f"Hold {head.hold_id} was released.", **common)
    if status != ReservationStatus.HELD:
        raise HoldAlreadyCommitted(
            f"Hold {head.hold_id} is already {status}.", booking_id=head.booking_id, **common
        )


@_audit_rejections(AuditEvent.COMMIT_REJECTED)
def hold_commit(
    *, actor: Actor, calendar: Calendar, hold_token: str, fencing_token: int | None = None
) -> ReservationGroup:
    """Phase 2: promote a live hold (all its calendars) to a booking."""
    rows = reservation_group(workspace=actor.workspace, hold_token_hash=_hash_token(hold_token))
    if not rows or rows[0].calendar_id != calendar.pk:
        raise NotFound(f"No hold with this hold_token on calendar {calendar.public_id}.")
    _refuse_unless_owner(actor, rows[0])
    _refuse_if_gated(rows[0])
    return _commit_hold(actor=actor, rows=rows, fencing_token=fencing_token, approved=False)


@_audit_rejections(AuditEvent.COMMIT_REJECTED)
def hold_commit_approved(*, actor: Actor, hold_id: str) -> ReservationGroup:
    """Commit a hold whose approval a human granted: the server commits on the agent's behalf, with
    the same rules (CAS, still live) as the agent's own commit. `actor` is the requesting agent with
    the deciding human recorded on it."""
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    return _commit_hold(actor=actor, rows=rows, fencing_token=None, approved=True)


# The commit as one CAS statement: row locks in id order (like every group-row lock, see
# _transition_group), then every row of the group moves from a live hold to committed, each with its
# own calendar's bump window fixed now (later setting changes don't move it). An agent's own commit also
# requires the hold not to be gated by an approval (the gate may have closed after the agent's read).
_COMMIT_SQL = """
UPDATE bookings_reservation r
   SET status = 'committed', version = r.version + 1, committed_at = %(now)s,
       booking_id = 'bk_' || substr(r.hold_id, 5),
       bump_window_ends_at = %(now)s + make_interval(secs => c.bump_window_seconds)
  FROM bookings_calendar c
 WHERE r.id IN (SELECT id FROM bookings_reservation WHERE hold_id = %(hold_id)s ORDER BY id FOR UPDATE)
   AND c.id = r.calendar_id AND r.status = 'held' AND r.expires_at > %(now)s
   AND (r.awaiting_approval IS NULL OR %(approved)s)
RETURNING r.id, r.version, r.booking_id, r.committed_at, r.bump_window_ends_at
"""


def _commit_hold(
    *, actor: Actor, rows: list[Reservation], fencing_token: int | None, approved: bool
) -> ReservationGroup:
    primary = rows[0]
    batch = InsertBatch()
    with transaction.atomic(durable=True):
        now, _ = _lock_calendars(sorted(r.calendar_id for r in rows))
        with bound_cursor() as cursor:
            cursor.execute(_COMMIT_SQL, {"now": now, "hold_id": primary.hold_id, "approved": approved})
            committed = {row_id: rest for row_id, *rest in cursor.fetchall()}
        if len(committed) != len(rows):
            fresh = _ordered(Reservation.objects.filter(hold_id=primary.hold_id))
            _raise_not_live(fresh[0], now)
            _refuse_if_gated(fresh[0])
            raise HoldExpired(f"Hold {primary.hold_id} is no longer live.", hold_id=primary.hold_id)
        if fencing_token is not None:
            _check_fencing_token(primary, fencing_token)  # raising rolls the commit back
        for row in rows:
            row.version, row.booking_id, row.committed_at, row.bump_window_ends_at = committed[row.pk]
            row.status = ReservationStatus.COMMITTED
        _audit_reservation(
            AuditEvent.COMMIT_CREATED,
            actor=actor,
            row=primary,
            reservation_public_id=primary.booking_id or "",
            details={"hold_id": primary.hold_id, "from_hold": True},
            batch=batch,
        )
        emit_reservation_event(EventType.BOOKING_COMMITTED, rows, batch=batch)
        batch.execute()
    return ReservationGroup(rows=rows)


def _check_fencing_token(hold: Reservation, presented: int) -> None:
    """Refuse a token older than one already issued for an overlapping range on this calendar."""
    newer = (
        Reservation.objects.filter(
            calendar_id=hold.calendar_id,
            start_time__lt=hold.end_time,
            start_time__gt=hold.start_time - MAX_RESERVATION_LENGTH,
            end_time__gt=hold.start_time,
            fencing_token__gt=presented,
        )
        .exclude(hold_id=hold.hold_id)
        .order_by("-fencing_token")
        .values_list("fencing_token", flat=True)
        .first()
    )
    if presented != hold.fencing_token or newer is not None:
        raise StaleFencingToken(
            f"Fencing token {presented} is stale for hold {hold.hold_id}.",
            presented_fencing_token=presented,
            current_fencing_token=max(hold.fencing_token, newer or 0),
        )


# The heartbeat's CAS: still-live rows of the hold, locked in id order, get expires_at = now + ttl, and
# are read back with their calendar and agent.
_EXTEND_SQL = f"""
WITH extended AS (
    UPDATE bookings_reservation
       SET expires_at = clock_timestamp() + make_interval(secs => %(ttl)s), version = version + 1
     WHERE id IN (SELECT id FROM bookings_reservation
                   WHERE hold_id = %(hold_id)s AND status = 'held' AND expires_at > clock_timestamp()
                   ORDER BY id FOR UPDATE)
       AND status = 'held'
    RETURNING *)
SELECT {RESERVATION_ROW_COLUMNS} FROM extended r {RESERVATION_ROW_JOINS}
"""


@_audit_rejections(AuditEvent.HOLD_EXTEND_REJECTED)
def hold_extend(*, actor: Actor, hold_id: str, hold_token: str, ttl_seconds: int) -> ReservationGroup:
    """Heartbeat: push a live hold's expiry to now + ttl. No calendar lock: the set of live rows does
    not change, and the CAS below loses cleanly to a concurrent eviction or expiry."""
    rows = _owned_hold(actor=actor, hold_id=hold_id, hold_token=hold_token)
    with transaction.atomic(durable=True):
        with bound_cursor() as cursor:
            cursor.execute(_EXTEND_SQL, {"ttl": ttl_seconds, "hold_id": hold_id})
            fresh = _ordered(reservation_rows_from(cursor.fetchall()))
        if len(fresh) != len(rows):
            with bound_cursor() as cursor:
                cursor.execute("SELECT clock_timestamp()")  # the CAS's clock (now() is the txn's start)
                clock = cursor.fetchone()
            assert clock is not None
            _raise_not_live(_ordered(Reservation.objects.filter(hold_id=hold_id))[0], clock[0])
            raise HoldExpired(f"Hold {hold_id} is no longer live.", hold_id=hold_id)
        _audit_reservation(
            AuditEvent.HOLD_EXTENDED,
            actor=actor,
            row=fresh[0],
            reservation_public_id=hold_id,
            details={"ttl_seconds": ttl_seconds, "expires_at": isoformat_z(fresh[0].expires_at)},  # type: ignore[arg-type]
        )
    return ReservationGroup(rows=fresh)


@_audit_rejections(AuditEvent.HOLD_RELEASE_REJECTED)
def hold_release(*, actor: Actor, hold_id: str, hold_token: str) -> ReservationGroup:
    rows = _owned_hold(actor=actor, hold_id=hold_id, hold_token=hold_token)
    return _release_hold(actor=actor, hold_id=hold_id, rows=rows)


def hold_release_unless_settled(*, actor: Actor, hold_id: str) -> ReservationGroup | None:
    """Release a hold if it is still live (an approval was denied, expired or cancelled); None if it
    already ended some other way (expired, evicted, released) — there is nothing left to undo."""
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        return None
    try:
        return _release_hold(actor=actor, hold_id=hold_id, rows=rows)
    except (HoldExpired, HoldEvicted, HoldReleased, HoldAlreadyCommitted):
        return None


@transaction.atomic(durable=True)
def hold_pin_expiry(
    *, actor: Actor, hold_id: str, until: datetime, reason: str, approval_id: str | None = None
) -> ReservationGroup:
    """Keep a live hold alive until `until` (an approval's expiry) instead of its TTL; CAS on live.

    With `approval_id` the hold is gated: the agent can no longer extend, commit or release it
    itself; the approval's decision does (hold_commit_approved / hold_release_unless_settled).
    Without it, any gate is lifted (an approval that was not created after all).
    """
    moved = Reservation.objects.filter(
        hold_id=hold_id,
        status=ReservationStatus.HELD,
        expires_at__gt=Now(),
        calendar__workspace=actor.workspace,
    ).update(expires_at=until, awaiting_approval=approval_id, version=F("version") + 1)
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    if moved != len(rows):
        _raise_not_live(rows[0], server_now())
        raise HoldExpired(f"Hold {hold_id} is no longer live.", hold_id=hold_id)
    _audit_reservation(
        AuditEvent.HOLD_EXTENDED,
        actor=actor,
        row=rows[0],
        reservation_public_id=hold_id,
        details={"expires_at": isoformat_z(until), "reason": reason},
    )
    return ReservationGroup(rows=rows)


def _release_hold(*, actor: Actor, hold_id: str, rows: list[Reservation]) -> ReservationGroup:
    if rows[0].status == ReservationStatus.RELEASED:
        return ReservationGroup(rows=rows)  # releasing twice is harmless: same answer, nothing written
    with transaction.atomic(durable=True):
        now, _ = _lock_calendars(sorted(r.calendar_id for r in rows))
        released = _transition_group(
            hold_id=hold_id,
            unexpired=True,
            from_status=ReservationStatus.HELD,
            to_status=ReservationStatus.RELEASED,
            now=now,
        )
        if len(released) != len(rows):
            fresh = _ordered(Reservation.objects.filter(hold_id=hold_id))
            _raise_not_live(fresh[0], now)
            raise HoldExpired(f"Hold {hold_id} is no longer live.", hold_id=hold_id)
        _audit_reservation(
            AuditEvent.HOLD_RELEASED,
            actor=actor,
            row=released[0],
            reservation_public_id=hold_id,
        )
        emit_reservation_event(EventType.HOLD_RELEASED, released)
    return ReservationGroup(rows=released)


@_audit_rejections(AuditEvent.BOOKING_CANCEL_REJECTED)
def booking_cancel(*, actor: Actor, booking_id: str) -> ReservationGroup:
    rows = reservation_group(workspace=actor.workspace, booking_id=booking_id)
    if not rows:
        raise NotFound(f"No booking {booking_id} in this workspace.")
    _refuse_unless_owner(actor, rows[0])
    if rows[0].status == ReservationStatus.CANCELLED:
        return ReservationGroup(rows=rows)
    with transaction.atomic(durable=True):
        now, _ = _lock_calendars(sorted(r.calendar_id for r in rows))
        cancelled = _transition_group(
            booking_id=booking_id,
            from_status=ReservationStatus.COMMITTED,
            to_status=ReservationStatus.CANCELLED,
            now=now,
        )
        if len(cancelled) != len(rows):
            status = (
                Reservation.objects.filter(booking_id=booking_id, is_primary=True)
                .values_list("status", flat=True)
                .first()
            )
            raise BookingNotLive(
                f"Booking {booking_id} is {status}.", booking_id=booking_id, booking_status=status
            )
        _audit_reservation(
            AuditEvent.BOOKING_CANCELLED,
            actor=actor,
            row=cancelled[0],
            reservation_public_id=booking_id,
        )
        emit_reservation_event(EventType.BOOKING_CANCELLED, cancelled)
    return ReservationGroup(rows=cancelled)


# --- Alternatives -----------------------------------------------------------------------------------------


# Live reservations near a request (lapsed holds left out): what alternatives must avoid.
_BUSY_NEAR_SQL = """
SELECT start_time, end_time FROM bookings_reservation
 WHERE calendar_id = ANY(%(calendars)s) AND status IN ('held', 'committed')
   AND start_time < %(end)s AND start_time > %(earliest)s AND end_time > %(start)s
   AND NOT (status = 'held' AND expires_at <= %(now)s)
"""


def _alternatives(
    calendars: Sequence[Calendar], span: Span, *, now: datetime | None = None
) -> list[dict[str, str]]:
    """Up to 3 free spans of the same length on every requested calendar, nearest first. `now` is the
    database time the caller already read, if it did (the loser path saves a round trip)."""
    slot_minutes = calendars[0].slot_minutes
    reach = timedelta(minutes=slot_minutes * ALTERNATIVES_MAX_STEPS)
    window = Span(span.start - reach, span.end + reach)
    if now is None:
        now = server_now()
    with bound_cursor() as cursor:
        cursor.execute(_BUSY_NEAR_SQL, _overlap_params([c.pk for c in calendars], window, now=now))
        busy = BusyIndex(Span(start, end) for start, end in cursor.fetchall())
    found = nearest_free(
        requested=span,
        busy=busy,
        slot_minutes=slot_minutes,
        not_before=now,
        count=ALTERNATIVES_COUNT,
        max_steps=ALTERNATIVES_MAX_STEPS,
    )
    return [{"start_time": isoformat_z(s.start), "end_time": isoformat_z(s.end)} for s in found]
