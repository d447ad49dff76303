"""Outbox events announcing reservation changes to the agent that owns the reservation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.dispatch import Signal

from agentcal.clock import isoformat_z
from agentcal.db import InsertBatch
from bookings.models import Reservation
from webhooks.models import EventType
from webhooks.outbox import outbox_emit


def _when(value: Any) -> str | None:
    return isoformat_z(value) if value is not None else None


def reservation_data(rows: Sequence[Reservation]) -> dict[str, Any]:
    """The reservation as webhook receivers see it (rows: primary first)."""
    head = rows[0]
    return {
        "id": head.booking_id or head.hold_id,
        "hold_id": head.hold_id,
        "booking_id": head.booking_id,
        "status": head.status,
        "calendar": head.calendar.public_id,
        "also_calendars": [r.calendar.public_id for r in rows[1:]],
        "start_time": isoformat_z(head.start_time),
        "end_time": isoformat_z(head.end_time),
        "priority": head.priority,
        "fencing_token": head.fencing_token,
        "agent_id": head.agent.public_id,
        "title": head.title,
        "metadata": head.metadata,
        "expires_at": _when(head.expires_at),
        "committed_at": _when(head.committed_at),
        "bump_window_ends_at": _when(head.bump_window_ends_at),
        "ended_at": _when(head.ended_at),
        "upstream_conflict": any(r.upstream_conflict_at is not None for r in rows),
    }


# Sent (inside the write's transaction) when a booking is committed, cancelled, bumped or moved, with
# `calendar_ids`: what copies bookings elsewhere (upstream write-behind) listens, so the engine does not
# need to know about it.
bookings_changed = Signal()
_BOOKING_CHANGES = frozenset(
    {
        EventType.BOOKING_COMMITTED,
        EventType.BOOKING_CANCELLED,
        EventType.BOOKING_BUMPED,
        EventType.BOOKING_MOVED,
    }
)


def emit_reservation_event(
    event_type: EventType, rows: Sequence[Reservation], *, batch: InsertBatch | None = None, **extra: Any
) -> None:
    head = rows[0]
    key = "booking" if event_type.startswith("booking.") else "hold"
    outbox_emit(
        event_type=event_type,
        workspace_id=head.calendar.workspace_id,
        agent_id=head.agent_id,
        data={key: reservation_data(rows), **extra},
        batch=batch,
    )
    if event_type in _BOOKING_CHANGES:
        bookings_changed.send(sender=Reservation, calendar_ids=[r.calendar_id for r in rows])
