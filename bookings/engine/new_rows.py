"""A new hold or booking's rows, audit row and event, queued in a batch and written in one statement."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError

from agentcal.db import InsertBatch, unsaved
from agentcal.errors import SlotConflict
from agentcal.ids import new_public_id
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.engine.groups import ReservationGroup, hash_token, ordered
from bookings.events import emit_event_of_a_statement, emit_reservation_event
from bookings.models import Calendar, Reservation, ReservationStatus
from bookings.spans import Span
from webhooks.models import EventType
from workspaces.actor import Actor


def record_creation(
    *,
    actor: Actor,
    group: ReservationGroup,
    calendars: Sequence[Calendar],
    span: Span,
    priority: int,
    commit: bool,
    batch: InsertBatch,
    displaced: Sequence[Reservation] = (),
    ignored_rules: bool = False,
    event_by_statement: bool = False,
    **details: Any,
) -> None:
    """The new hold or booking's audit row and `hold.created` / `booking.committed` event (its payload
    written by the statement, from the row it inserts, when `event_by_statement`: fastpath.py)."""
    head = group.primary
    audit_record(
        event_type=AuditEvent.COMMIT_CREATED if commit else AuditEvent.HOLD_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        batch=batch,
        calendar_public_id=calendars[0].public_id,
        reservation_public_id=head.booking_id if commit else head.hold_id,  # type: ignore[arg-type]
        requested_start=span.start,
        requested_end=span.end,
        fencing_token=head.fencing_token,
        details={
            "priority": priority,
            "also_calendars": [c.public_id for c in calendars[1:]],
            "displaced": sorted({r.booking_id or r.hold_id for r in displaced if r.is_primary}),
            # Passed over the calendars' rules (working hours, buffers, notice), by its override scope.
            **({"ignored_rules": True} if ignored_rules else {}),
            **details,
        },
    )
    event_type = EventType.BOOKING_COMMITTED if commit else EventType.HOLD_CREATED
    if event_by_statement:
        emit_event_of_a_statement(event_type, calendar=calendars[0], agent_id=head.agent_id, batch=batch)
    else:
        emit_reservation_event(event_type, group.rows, batch=batch)


def new_group(
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
    """The new hold or booking's rows, queued in `batch` (written by insert_group)."""
    suffix = new_public_id("hld").removeprefix("hld_")  # the booking id reuses it: hld_X -> bk_X
    hold_token = None if commit else "hlt_" + secrets.token_urlsafe(24)
    primary = calendars[0]
    ttl = timedelta(seconds=ttl_seconds or primary.hold_ttl_seconds)
    rows = [
        unsaved(
            Reservation,
            hold_id=f"hld_{suffix}",
            booking_id=f"bk_{suffix}" if commit else None,
            calendar=cal,
            agent=actor.agent,
            is_primary=cal.pk == primary.pk,
            status=ReservationStatus.COMMITTED if commit else ReservationStatus.HELD,
            priority=priority,
            start_time=span.start,
            end_time=span.end,
            hold_token_hash=hash_token(hold_token) if hold_token else None,
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
    group = ReservationGroup(rows=ordered(rows), hold_token=hold_token)
    for row in group.rows:
        batch.add(Reservation, {f.attname: getattr(row, f.attname) for f in RESERVATION_INSERT_FIELDS})
    return group


RESERVATION_INSERT_FIELDS = [f for f in Reservation._meta.concrete_fields if not f.primary_key]


def insert_group(group: ReservationGroup, batch: InsertBatch) -> None:
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
