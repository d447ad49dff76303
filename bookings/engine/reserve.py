"""Creating holds and bookings: the pre-check, the locked write, takeovers and the new rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from agentcal.db import InsertBatch, bound_cursor, unsaved
from agentcal.errors import SlotConflict
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.engine.alternatives import alternatives, search_window
from bookings.engine.auditing import audit_rejections
from bookings.engine.budgets import budget_params, over_budget, spend_budget
from bookings.engine.buffers import check_buffers
from bookings.engine.expiry import clear_the_way
from bookings.engine.fastpath import (
    MAX_ONE_STATEMENT_TRIES,
    PRECHECK_WIDTH,
    RowsFor,
    one_statement_transaction,
    reserve_in_one_statement,
)
from bookings.engine.groups import ReservationGroup, groups
from bookings.engine.locking import CalendarBusy, await_writers, lock_calendars
from bookings.engine.new_rows import insert_group, new_group, record_creation
from bookings.engine.rules import (
    PAST_START_GRACE,
    check_not_in_the_past,
    check_notice,
    check_span_length,
    check_working_hours,
    distinct_calendars,
    may_take_over,
    priority_for,
    ruled_calendars,
    slot_conflict,
    upstream_blocker_from,
    upstream_conflict,
)
from bookings.engine.statements import PRECHECK_SQL
from bookings.engine.transitions import transition_group
from bookings.events import emit_reservation_event
from bookings.freshness import require_fresh
from bookings.models import Calendar, Reservation, ReservationStatus
from bookings.spans import Span
from bookings.sql import overlap_params
from webhooks.models import EventType
from workspaces.actor import Actor
from workspaces.models import Agent

# A takeover whose victim spans calendars outside the locked set retries with the larger set.
MAX_LOCK_EXPANSIONS = 3


@audit_rejections(AuditEvent.HOLD_REJECTED)
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
    ignore_rules: bool = False,
    max_upstream_staleness_seconds: int | None = None,
) -> ReservationGroup:
    """Phase 1: a soft hold that blocks the span until it expires, is committed, released or evicted."""
    return _reserve(
        ignore_rules=ignore_rules,
        max_upstream_staleness_seconds=max_upstream_staleness_seconds,
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


@audit_rejections(AuditEvent.COMMIT_REJECTED)
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
    ignore_rules: bool = False,
    max_upstream_staleness_seconds: int | None = None,
) -> ReservationGroup:
    """Single-step atomic hold + commit."""
    return _reserve(
        ignore_rules=ignore_rules,
        max_upstream_staleness_seconds=max_upstream_staleness_seconds,
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


class _NeedMoreLocks(Exception):
    def __init__(self, calendar_ids: set[int]) -> None:
        self.calendar_ids = calendar_ids


class _Blocked(Exception):
    """The pre-check's conflict, with the database's now when it looked (for the alternatives), and
    what was busy near the span then, if the pre-check read that too."""

    def __init__(
        self, conflict: SlotConflict, checked_at: datetime, busy_near: list[Span] | None = None
    ) -> None:
        super().__init__()  # not in `args`: the conflict, raised while this is handled, names it
        self._conflict: SlotConflict | None = conflict
        self.checked_at, self.busy_near = checked_at, busy_near

    def refusal(self, alternatives: list[dict[str, str]]) -> SlotConflict:
        """The conflict to raise, with its alternatives, let go of here: raised while this is being
        handled, it names this as its context, and a link back would make the pair a reference cycle
        that only Python's cyclic collector frees (docs/performance-notes.md, "Reference cycles")."""
        conflict, self._conflict = self._conflict, None
        assert conflict is not None, "a pre-check's refusal is raised once"
        conflict.extra["alternatives"] = alternatives
        return conflict


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
    ignore_rules: bool,
    max_upstream_staleness_seconds: int | None,
) -> ReservationGroup:
    assert actor.agent is not None
    calendars = distinct_calendars(calendar, also_calendars)
    check_span_length(span, calendars)
    require_fresh(calendars, max_upstream_staleness_seconds)
    priority = priority_for(actor.agent, priority)
    ruled = ruled_calendars(actor, calendars, ignore_rules=ignore_rules)
    check_working_hours(span, ruled)
    lock_ids = sorted(c.pk for c in calendars)
    now = None
    try:
        nowait = True
        one_statement = not any(c.buffer for c in ruled)  # the buffer look needs the lock: general path
        if len(calendars) == 1 and if_match is None and not connection.in_atomic_block and one_statement:
            # The pre-check, and when the span is empty the whole write, in one statement.
            made = _reserve_in_one_statement(
                actor=actor,
                ruled=ruled,
                ignore_rules=ignore_rules,
                calendar=calendar,
                span=span,
                priority=priority,
                ttl_seconds=ttl_seconds,
                commit=commit,
                title=title,
                attendees=attendees,
                metadata=metadata,
            )
            if isinstance(made, ReservationGroup):
                return made
            now, nowait = made
        else:
            # Cheap, unlocked pre-check: never trusted for correctness, only to let losers fail fast.
            now = _precheck(calendars, span, priority, ruled)
        for _ in range(MAX_LOCK_EXPANSIONS):
            try:
                return _reserve_locked(
                    actor=actor,
                    ruled=ruled,
                    ignore_rules=ignore_rules,
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
            except CalendarBusy:
                # Another write on these calendars is in flight, maybe for this very span (a herd). Wait
                # for it to end, then look again without the lock: if it took the span, this request
                # loses now, at the same moment as every other loser, instead of each loser taking the
                # lock in turn (and delaying unrelated writes to the calendar). Otherwise, queue for it.
                await_writers(lock_ids)
                now = _precheck(calendars, span, priority, ruled)
                nowait = False
            except _NeedMoreLocks as more:
                lock_ids = sorted({*lock_ids, *more.calendar_ids})
                nowait = False
        raise SlotConflict("The reservations in the way kept changing; re-read availability and retry.")
    except _Blocked as blocked:
        # Found by the pre-check, with the database's now of that look: no lock was taken.
        raise blocked.refusal(
            alternatives(calendars, span, now=blocked.checked_at, busy_near=blocked.busy_near)
        ) from None
    except SlotConflict as conflict:
        conflict.extra["alternatives"] = alternatives(calendars, span, now=now)
        raise


def _precheck(
    calendars: Sequence[Calendar], span: Span, priority: int, ruled: Sequence[Calendar]
) -> datetime:
    """Refuse what is certainly refused without taking a lock (_Blocked); returns the database's now."""
    with bound_cursor() as cursor:
        cursor.execute(PRECHECK_SQL, overlap_params([c.pk for c in calendars], span, priority=priority))
        found = cursor.fetchone()
    assert found is not None  # one row always: SELECT … FROM (SELECT 1) LEFT JOIN
    return _judge_precheck(found, span, priority, ruled)


def _judge_precheck(
    found: Sequence[Any],
    span: Span,
    priority: int,
    ruled: Sequence[Calendar],
    busy_near: list[Span] | None = None,
) -> datetime:
    """Raise what PRECHECK_SQL's row says is certainly refused (_Blocked, a span in the past or too
    soon for a calendar's notice); else return the database's now it was read at."""
    now, blocker_id, *blocker = found[:13]
    upstream = found[13:PRECHECK_WIDTH]
    check_not_in_the_past(span, now)
    check_notice(span, ruled, now)
    if upstream[0] is not None:
        raise _Blocked(upstream_conflict(upstream_blocker_from(upstream), span, priority), now, busy_near)
    if blocker_id is not None:
        raise _Blocked(slot_conflict(_blocker_row(blocker_id, *blocker), span, priority, now), now, busy_near)
    return now


# What the rows the one statement writes carry where the database decides (fencing token, times) until
# it has: never written (fastpath.py puts the database's values in their place).
_DECIDED_BY_THE_DATABASE = datetime(1970, 1, 1, tzinfo=UTC)


def _reserve_in_one_statement(
    *,
    actor: Actor,
    ruled: Sequence[Calendar],
    ignore_rules: bool,
    calendar: Calendar,
    span: Span,
    priority: int,
    ttl_seconds: int | None,
    commit: bool,
    title: str,
    attendees: list[Any],
    metadata: dict[str, Any],
) -> ReservationGroup | tuple[datetime, bool]:
    """The pre-check and, when nothing at all is in the span, the write, in one statement
    (bookings/engine/fastpath.py). Returns the new group; raises the pre-check's refusal; or returns
    the pre-check's now and whether the general path may try the lock without queueing (the span
    holds something the caller may take over or a lapsed hold: the look under the lock decides)."""
    ttl = ttl_seconds or calendar.hold_ttl_seconds
    rows = RowsFor()
    budget = budget_params(actor, holds=0 if commit else 1, bookings=1 if commit else 0)
    near = search_window([calendar], span)
    # With notice to give, the earliest start is now + notice, not a little before now.
    grace = -notice if (notice := _notice(ruled)) else PAST_START_GRACE
    with one_statement_transaction():
        group = new_group(
            actor=actor,
            calendars=[calendar],
            versions={calendar.pk: 0},
            span=span,
            priority=priority,
            ttl_seconds=ttl,
            commit=commit,
            now=_DECIDED_BY_THE_DATABASE,
            title=title,
            attendees=attendees,
            metadata=metadata,
            batch=rows,
        )
        record_creation(
            actor=actor,
            group=group,
            calendars=[calendar],
            span=span,
            priority=priority,
            commit=commit,
            batch=rows,
            ignored_rules=ignore_rules,
            event_by_statement=True,
        )
        for attempt in range(MAX_ONE_STATEMENT_TRIES):
            outcome = reserve_in_one_statement(
                calendar=calendar,
                span=span,
                priority=priority,
                near=near,
                grace=grace,
                ttl_seconds=None if commit else ttl,
                bump_window_seconds=calendar.bump_window_seconds,
                agent_public_id=actor.agent_public_id,
                rows=rows,
                commit=commit,
                budget=budget,
                # The first look takes the lock only if it is free: a herd's losers wait for the winner
                # beside the queue and all look again at once. A look after that queues for it.
                queue=attempt > 0,
            )
            if outcome.made is not None or not outcome.clear or not outcome.within_budget:
                break
            # The span was empty, but another write held the lock (maybe for this very span: a herd)
            # and the statement waited for it to end; or the fresh look under the lock found the span
            # taken meanwhile. Look again.
        if outcome.made is None:
            transaction.set_rollback(True)  # nothing was written: drop the on-commit callbacks
    if not outcome.within_budget:
        raise over_budget(actor, holds=0 if commit else 1)
    if outcome.made is None:
        now = _judge_precheck(outcome.precheck, span, priority, ruled, outcome.busy_near)
        if not outcome.clear:
            return now, True
    else:
        row_id, version, decided_at = outcome.made
        head = group.primary
        head.pk, head._state.adding = row_id, False
        head.fencing_token, head.created_at = version, decided_at
        if commit:
            head.committed_at = decided_at
            head.bump_window_ends_at = decided_at + timedelta(seconds=calendar.bump_window_seconds)
        else:
            head.expires_at = decided_at + timedelta(seconds=ttl)
        return group
    # Each look found its span empty, yet other writes kept it from writing (a lock taken, then writes
    # landing in the span meanwhile): the general path, after a last look, as _reserve() does.
    return _precheck([calendar], span, priority, ruled), False


def _notice(ruled: Sequence[Calendar]) -> timedelta:
    return timedelta(minutes=max((c.min_notice_minutes for c in ruled), default=0))


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
    """The pre-check's blocker as an (unsaved) row with what slot_conflict reads."""
    return unsaved(
        Reservation,
        id=row_id,
        status=status,
        priority=priority,
        start_time=start,
        end_time=end,
        expires_at=expires_at,
        bump_window_ends_at=bump_window_ends_at,
        calendar=unsaved(Calendar, id=calendar_id, public_id=calendar_public_id, slot_minutes=slot_minutes),
        agent=unsaved(Agent, id=agent_id, public_id=agent_public_id),
    )


def _reserve_locked(
    *,
    actor: Actor,
    ruled: Sequence[Calendar],
    ignore_rules: bool,
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
        now, versions = lock_calendars(
            lock_ids, if_match=(primary.pk, if_match) if if_match is not None else None, nowait=nowait
        )
        spend_budget(actor, holds=0 if commit else 1, bookings=1 if commit else 0)
        check_notice(span, ruled, now)  # at the lock's clock, which decides
        found = clear_the_way(calendar_ids=calendar_ids, span=span, now=now, batch=batch)
        if found.upstream is not None:
            raise upstream_conflict(found.upstream, span, priority)
        in_the_way = found.reservations
        for row in in_the_way:
            if not may_take_over(row, priority=priority, now=now):
                raise slot_conflict(row, span, priority, now)
        check_buffers(ruled, span, now=now, priority=priority)

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

        group = new_group(
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
        record_creation(
            actor=actor,
            group=group,
            calendars=calendars,
            span=span,
            priority=priority,
            commit=commit,
            batch=batch,
            displaced=displaced,
            ignored_rules=ignore_rules,
        )
        for victim_rows in groups(displaced):
            _announce_displacement(victim_rows, by=head, actor=actor, batch=batch)
        insert_group(group, batch)
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
        moved = transition_group(hold_id=hold_id, from_status=status, to_status=to_status, now=now)
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
        reason="priority",
        displaced_by={
            "id": by.booking_id or by.hold_id,
            "agent_id": by.agent.public_id,
            "priority": by.priority,
        },
        alternatives=alternatives(
            [r.calendar for r in victim_rows], Span(victim.start_time, victim.end_time), now=by.created_at
        ),
        batch=batch,
    )
