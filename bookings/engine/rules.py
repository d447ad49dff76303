"""The engine's pure rules: no database, no clock of their own (`now` is always the database's)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from agentcal.clock import isoformat_z
from agentcal.errors import (
    BookingTooLong,
    InsufficientNotice,
    InsufficientScope,
    InvalidRange,
    OutsideWorkingHours,
    PriorityNotAllowed,
    SlotConflict,
)
from bookings.models import BusyBlock, Calendar, Reservation, ReservationStatus
from bookings.rules import day_hours_json, notice_start, open_spans, zone_named
from bookings.spans import MAX_BUCKETS, Span, bucket_label, buckets_touched
from workspaces.actor import Actor
from workspaces.models import Agent, Scope

# How far into the past a span may start (clock skew between an agent and the database).
PAST_START_GRACE = timedelta(seconds=60)


def distinct_calendars(calendar: Calendar, also: Sequence[Calendar]) -> list[Calendar]:
    """The request's calendars, primary first, each once."""
    seen = {calendar.pk: calendar}
    for other in also:
        seen.setdefault(other.pk, other)
    return list(seen.values())


def check_span_length(span: Span, calendars: Sequence[Calendar]) -> None:
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


def check_not_in_the_past(span: Span, now: datetime) -> None:
    """The database's clock decides what is past; a little grace for an agent whose clock lags."""
    if span.end <= now or span.start < now - PAST_START_GRACE:
        raise InvalidRange("The span is in the past by the server's clock.", server_time=isoformat_z(now))


def ruled_calendars(actor: Actor, calendars: Sequence[Calendar], *, ignore_rules: bool) -> list[Calendar]:
    """The calendars whose rules bind this write: none when the agent may and does ignore them."""
    if ignore_rules:
        if Scope.BOOKINGS_OVERRIDE_RULES not in actor.scopes:
            raise InsufficientScope(
                f"ignore_rules needs the `{Scope.BOOKINGS_OVERRIDE_RULES}` scope.",
                required_scope=str(Scope.BOOKINGS_OVERRIDE_RULES),
            )
        return []
    return [c for c in calendars if c.has_rules]


def check_working_hours(span: Span, calendars: Sequence[Calendar]) -> None:
    """The whole span inside each calendar's working hours (and date overrides), in its own zone."""
    for cal in calendars:
        rules = cal.rules
        if rules is None or open_spans(rules, cal.timezone, span) == [span]:
            continue
        zone = zone_named(cal.timezone)
        local_start, local_end = span.start.astimezone(zone), span.end.astimezone(zone)
        raise OutsideWorkingHours(
            f"{local_start:%a %d %b %H:%M}–{local_end:%H:%M} ({cal.timezone}) is not inside the working "
            f"hours of calendar {cal.public_id}.",
            calendar=cal.public_id,
            timezone=cal.timezone,
            local_start_time=local_start.isoformat(),
            local_end_time=local_end.isoformat(),
            hours_that_day={
                day.isoformat(): day_hours_json(rules.hours_on(day))
                for day in sorted({local_start.date(), local_end.date()})
            },
        )


def check_notice(span: Span, calendars: Sequence[Calendar], now: datetime) -> None:
    """Nothing starts sooner than each calendar's notice, by the database's clock `now`."""
    for cal in calendars:
        earliest = notice_start(now, cal.min_notice_minutes)
        if cal.min_notice_minutes and span.start < earliest:
            raise InsufficientNotice(
                f"Calendar {cal.public_id} needs {cal.min_notice_minutes} minutes' notice: the earliest "
                f"start now is {isoformat_z(earliest)}.",
                calendar=cal.public_id,
                min_notice_minutes=cal.min_notice_minutes,
                earliest_start_time=isoformat_z(earliest),
                server_time=isoformat_z(now),
            )


def priority_for(agent: Agent, requested: int | None) -> int:
    """The priority a request runs at: the agent's own unless it asks for one up to its maximum."""
    if requested is None:
        return agent.priority
    if requested > agent.max_priority:
        raise PriorityNotAllowed(
            f"Priority {requested} is above this agent's maximum of {agent.max_priority}.",
            max_priority=agent.max_priority,
            requested_priority=requested,
        )
    return requested


def may_take_over(row: Reservation, *, priority: int, now: datetime) -> bool:
    """A request of `priority` may take over `row` only with a strictly greater priority (ties keep the
    first writer, so two equal agents cannot ping-pong a slot), and only while the row is bumpable (a
    live hold, or a commit inside its bump window). statements.PRECHECK_SQL states the same in SQL."""
    return row.priority < priority and row.is_bumpable_at(now)


def slot_conflict(blocker: Reservation, span: Span, caller_priority: int, now: datetime) -> SlotConflict:
    """The 409 for a live `blocker` the caller may not take over at `now`."""
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
    # The caller outranks it, so only its closed bump window stands in the way.
    frozen = blocker.priority < caller_priority and blocker.is_frozen_at(now)
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


def upstream_blocker_from(values: Sequence[Any]) -> BusyBlock:
    """A block as read by statements._UPSTREAM_BLOCKER (an unsaved row with what upstream_conflict
    reads)."""
    start, end, source, calendar_id, calendar_public_id, slot_minutes = values
    return BusyBlock(
        start_time=start,
        end_time=end,
        source=source,
        calendar=Calendar(id=calendar_id, public_id=calendar_public_id, slot_minutes=slot_minutes),
    )


def upstream_conflict(block: BusyBlock, span: Span, caller_priority: int) -> SlotConflict:
    """The 409 for an upstream busy block in the way: like a frozen booking, no priority takes it over."""
    return SlotConflict(
        f"The span overlaps busy time in the calendar owner's own {block.get_source_display()} "
        "calendar; no priority can take it over.",
        conflicting_bucket=bucket_label(max(span.start, block.start_time), block.calendar.slot_minutes),
        conflicting={
            "calendar": block.calendar.public_id,
            "start_time": isoformat_z(block.start_time),
            "end_time": isoformat_z(block.end_time),
            "status": "busy",
            "source": block.source,
        },
        held_by_priority=None,
        caller_priority=caller_priority,
        retryable=False,
    )
