"""Moving a booking: the same booking, on a new span on every one of its calendars, in one transaction.

Under the locks of all the booking's calendars (id order, like every write) the new span is judged as a
hold's would be — its rules, what is in the way (the booking itself aside) — and then one CAS moves
every row: the old span is free and the new one taken at the same commit, or nothing changes. The
booking keeps its id; each row gets its calendar's new version as fencing token and a bump window
restarted from now. A bumped booking may come back this way within BUMPED_MOVE_WINDOW of its bump (the
reschedule cascade). A move never takes anything over: it only goes where the time is free. A live
booking "moved" to the span it has is left as it is: a retry must not restart a frozen booking's bump
window, hand out a new fencing token or tell anyone of a move.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from django.db import transaction

from agentcal.clock import isoformat_z
from agentcal.db import InsertBatch, bound_cursor
from agentcal.errors import (
    BookingNotLive,
    InsufficientNotice,
    InvalidRange,
    InvalidRequest,
    NotFound,
    SlotConflict,
    StaleFencingToken,
)
from audit.events import AuditEvent
from bookings.engine.alternatives import alternatives
from bookings.engine.auditing import audit_rejections, audit_reservation
from bookings.engine.buffers import check_buffers
from bookings.engine.calendars import calendars_for_write
from bookings.engine.expiry import clear_the_way
from bookings.engine.find_and_hold import no_slot_found
from bookings.engine.groups import ReservationGroup, ordered
from bookings.engine.locking import lock_calendars
from bookings.engine.rules import (
    check_not_in_the_past,
    check_notice,
    check_span_length,
    check_working_hours,
    ruled_calendars,
    slot_conflict,
    upstream_conflict,
)
from bookings.engine.statements import MOVE_SQL
from bookings.engine.transitions import refuse_unless_owner, refuse_unless_person
from bookings.events import emit_reservation_event
from bookings.freshness import require_fresh
from bookings.models import Calendar, Reservation, ReservationStatus
from bookings.search import SearchQuery, find_common_time, search
from bookings.selectors import reservation_group, reservation_rows_from
from bookings.spans import Span
from webhooks.models import EventType
from workspaces.actor import Actor

# How long after its bump a booking may still be moved back into life.
BUMPED_MOVE_WINDOW = timedelta(hours=24)


@audit_rejections(AuditEvent.BOOKING_MOVE_REJECTED)
def booking_move(
    *,
    actor: Actor,
    booking_id: str,
    span: Span | None = None,
    query: SearchQuery | None = None,
    if_match: int | None = None,
    fencing_token: int | None = None,
    ignore_rules: bool = False,
    max_upstream_staleness_seconds: int | None = None,
) -> ReservationGroup:
    """Move the caller's booking to `span`, or to the best time `query` finds for its calendars, on all
    its calendars; or raise and change nothing. A signed-in person (the dashboard; an actor with no
    agent) may move any booking of the workspace this way, under the same rules."""
    rows = reservation_group(workspace=actor.workspace, booking_id=booking_id)
    if not rows:
        raise NotFound(f"No booking {booking_id} in this workspace.")
    head = rows[0]
    if actor.agent is None:
        refuse_unless_person(actor)
    else:
        refuse_unless_owner(actor, head)
    calendars = calendars_for_write(
        workspace_id=actor.workspace.pk, public_ids=[r.calendar.public_id for r in rows]
    )
    require_fresh(calendars, max_upstream_staleness_seconds)
    ruled = ruled_calendars(actor, calendars, ignore_rules=ignore_rules)
    if query is not None:
        query = _search_for(query, head, calendars)
        found = find_common_time(workspace_id=actor.workspace.pk, query=query)
        if not found.candidates:
            raise no_slot_found(found)
        targets = [c.span for c in found.candidates]
    else:
        assert span is not None
        check_span_length(span, calendars)
        check_working_hours(span, ruled)
        targets = [span]
    lock_ids = sorted(c.pk for c in calendars)
    batch = InsertBatch()
    try:
        with transaction.atomic(durable=True):
            now, versions = lock_calendars(
                lock_ids, if_match=(calendars[0].pk, if_match) if if_match is not None else None
            )
            # Read again under the locks: what the booking is now decides.
            rows = ordered(
                Reservation.objects.filter(booking_id=booking_id).select_related("calendar", "agent")
            )
            head = rows[0]
            _refuse_unless_movable(head, now=now)
            if fencing_token is not None and fencing_token != head.fencing_token:
                raise StaleFencingToken(
                    f"Fencing token {fencing_token} is not the booking's current one ({head.fencing_token}).",
                    current_fencing_token=head.fencing_token,
                )
            before = Span(head.start_time, head.end_time)
            if head.status == ReservationStatus.COMMITTED and query is None and targets[0] == before:
                return ReservationGroup(rows=rows)
            target = _first_free(targets, head, lock_ids, ruled, now=now, batch=batch, exact=query is None)
            if target is None:
                # Every candidate was taken since the search: search again where nothing can change.
                assert query is not None
                again = search(workspace_id=actor.workspace.pk, query=query, now=now)
                if not again.candidates:
                    raise no_slot_found(again)
                target = again.candidates[0].span
                _judge(target, head, lock_ids, ruled, now=now, batch=batch)
            span = target
            if head.status == ReservationStatus.COMMITTED and span == before:
                return ReservationGroup(rows=rows)
            with bound_cursor() as cursor:
                cursor.execute(
                    MOVE_SQL,
                    {
                        "booking_id": booking_id,
                        "from_status": head.status,
                        "start": span.start,
                        "end": span.end,
                        "now": now,
                        "calendars": list(versions),
                        "versions": list(versions.values()),
                    },
                )
                moved = ordered(reservation_rows_from(cursor.fetchall()))
            if len(moved) != len(rows):  # unreachable under the locks; the CAS is what we trust
                raise SlotConflict("The booking changed concurrently; read it again.", retryable=True)
            moves = {"from": _span_json(before), "to": _span_json(span)}
            audit_reservation(
                AuditEvent.BOOKING_MOVED,
                actor=actor,
                row=moved[0],
                reservation_public_id=booking_id,
                details={**moves, "was": head.status, "calendars": [r.calendar.public_id for r in moved]},
                batch=batch,
            )
            emit_reservation_event(EventType.BOOKING_MOVED, moved, batch=batch, **moves)
            batch.execute()
    except SlotConflict as conflict:
        if span is not None:
            conflict.extra["alternatives"] = alternatives(calendars, span)
        raise
    return ReservationGroup(rows=moved)


def _search_for(query: SearchQuery, head: Reservation, calendars: list[Calendar]) -> SearchQuery:
    """The search of a move: over the booking's own calendars (its own time not in its way)."""
    own = sorted(c.public_id for c in calendars)
    if sorted(query.required) != own:
        raise InvalidRequest(
            "A move keeps the booking's calendars: search exactly those as `calendars`.",
            errors={"search": {"calendars": [f"Must be the booking's calendars: {', '.join(own)}."]}},
        )
    return replace(query, moving=head.hold_id)


def _first_free(
    targets: list[Span],
    head: Reservation,
    lock_ids: list[int],
    ruled: list[Calendar],
    *,
    now: datetime,
    batch: InsertBatch,
    exact: bool,
) -> Span | None:
    """The first target the booking may move to now; an exact span's refusal is raised, a search's
    candidate that was taken meanwhile is skipped."""
    for target in targets:
        try:
            _judge(target, head, lock_ids, ruled, now=now, batch=batch)
        except (SlotConflict, InsufficientNotice, InvalidRange):
            if exact:
                raise
            continue
        return target
    return None


def _judge(
    span: Span,
    head: Reservation,
    lock_ids: list[int],
    ruled: list[Calendar],
    *,
    now: datetime,
    batch: InsertBatch,
) -> None:
    """Refuse `span` as a hold's would be refused (the booking itself aside), under the locks."""
    check_not_in_the_past(span, now)
    check_notice(span, ruled, now)
    found = clear_the_way(calendar_ids=lock_ids, span=span, now=now, batch=batch)
    if found.upstream is not None:
        raise upstream_conflict(found.upstream, span, head.priority)
    for row in found.reservations:
        if row.hold_id != head.hold_id:
            raise slot_conflict(row, span, head.priority, now)
    check_buffers(ruled, span, now=now, priority=head.priority, moving=head.hold_id)


def _refuse_unless_movable(head: Reservation, *, now: datetime) -> None:
    if head.status == ReservationStatus.COMMITTED:
        return
    if head.status == ReservationStatus.BUMPED and head.ended_at is not None:
        if now - head.ended_at <= BUMPED_MOVE_WINDOW:
            return
        raise BookingNotLive(
            f"Booking {head.booking_id} was bumped at {isoformat_z(head.ended_at)}; a bumped booking may be "
            f"moved back only within {int(BUMPED_MOVE_WINDOW.total_seconds() // 3600)} hours of its bump.",
            booking_id=head.booking_id,
            booking_status=head.status,
            bumped_at=isoformat_z(head.ended_at),
        )
    raise BookingNotLive(
        f"Booking {head.booking_id} is {head.status}.", booking_id=head.booking_id, booking_status=head.status
    )


def _span_json(span: Span) -> dict[str, str]:
    return {"start_time": isoformat_z(span.start), "end_time": isoformat_z(span.end)}
