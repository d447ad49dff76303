"""Outbox events announcing reservation changes to the agent that owns the reservation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.dispatch import Signal

from agentcal.clock import isoformat_z
from agentcal.db import InsertBatch
from bookings.models import Calendar, Reservation
from bookings.sql import iso_z
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
    _emit(
        event_type,
        workspace_id=head.calendar.workspace_id,
        agent_id=head.agent_id,
        calendar_ids=[r.calendar_id for r in rows],
        data={_payload_key(event_type): reservation_data(rows), **extra},
        batch=batch,
    )


def emit_event_of_a_statement(
    event_type: EventType, *, calendar: Calendar, agent_id: int, batch: InsertBatch
) -> None:
    """The event of a reservation alone on `calendar`, queued in `batch` for a statement that decides
    the row itself and writes the payload with reservation_event_sql() in place of this one's."""
    _emit(
        event_type,
        workspace_id=calendar.workspace_id,
        agent_id=agent_id,
        calendar_ids=[calendar.pk],
        data={},
        batch=batch,
    )


def reservation_event_sql(event_type: EventType, row: str) -> str:
    """The payload emit_reservation_event() writes for a reservation alone on its calendar, as SQL over
    the reservation's row (alias `row`) after the change, with the calendar's and agent's public ids as
    the parameters `%(calendar_public_id)s` and `%(agent_public_id)s`. The same fields as
    reservation_data(), written by the database (tests/bookings/test_one_statement_writes.py compares)."""
    fields = {
        "id": f"COALESCE({row}.booking_id, {row}.hold_id)",
        "hold_id": f"{row}.hold_id",
        "booking_id": f"{row}.booking_id",
        "status": f"{row}.status",
        "calendar": "%(calendar_public_id)s::text",
        "also_calendars": "'[]'::jsonb",
        "start_time": iso_z(f"{row}.start_time"),
        "end_time": iso_z(f"{row}.end_time"),
        "priority": f"{row}.priority",
        "fencing_token": f"{row}.fencing_token",
        "agent_id": "%(agent_public_id)s::text",
        "title": f"{row}.title",
        "metadata": f"{row}.metadata",
        "expires_at": iso_z(f"{row}.expires_at"),
        "committed_at": iso_z(f"{row}.committed_at"),
        "bump_window_ends_at": iso_z(f"{row}.bump_window_ends_at"),
        "ended_at": iso_z(f"{row}.ended_at"),
        "upstream_conflict": f"{row}.upstream_conflict_at IS NOT NULL",
    }
    data = ", ".join(f"'{name}', {expression}" for name, expression in fields.items())
    return f"jsonb_build_object('{_payload_key(event_type)}', jsonb_build_object({data}))"


def _payload_key(event_type: EventType) -> str:
    return "booking" if event_type.startswith("booking.") else "hold"


def _emit(
    event_type: EventType,
    *,
    workspace_id: int,
    agent_id: int,
    calendar_ids: list[int],
    data: dict[str, Any],
    batch: InsertBatch | None,
) -> None:
    outbox_emit(event_type=event_type, workspace_id=workspace_id, agent_id=agent_id, data=data, batch=batch)
    if event_type in _BOOKING_CHANGES:
        bookings_changed.send(sender=Reservation, calendar_ids=calendar_ids)
