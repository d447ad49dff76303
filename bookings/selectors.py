"""Reads that several places need: availability and reservation groups."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Now

from bookings.models import LIVE_STATUSES, MAX_RESERVATION_LENGTH, Calendar, Reservation, ReservationStatus
from bookings.spans import BusyIndex, Span, grid_slots
from workspaces.models import Workspace

MAX_AVAILABILITY_WINDOW = timedelta(days=62)
MAX_FREE_SLOTS = 500


@dataclass
class Availability:
    busy: list[Reservation]
    free_slots: list[Span]
    version: int
    server_time: datetime


def availability(*, calendar: Calendar, window: Span, duration: timedelta | None) -> Availability:
    """Busy reservations and free time in `window`, with the calendar version they correspond to.

    Read in one REPEATABLE READ snapshot so the version (the ETag an agent may send back as If-Match)
    describes exactly the busy list returned. Lapsed holds are left out whether or not anything has
    expired them yet.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute("SELECT version, now() FROM bookings_calendar WHERE id = %s", [calendar.pk])
            version, now = cursor.fetchone()
        busy = list(
            Reservation.objects.filter(
                calendar=calendar,
                status__in=LIVE_STATUSES,
                start_time__lt=window.end,
                start_time__gt=window.start - MAX_RESERVATION_LENGTH,
                end_time__gt=window.start,
            )
            .exclude(status=ReservationStatus.HELD, expires_at__lte=Now())
            .select_related("agent")
            .order_by("start_time")
        )
    index = BusyIndex(Span(r.start_time, r.end_time) for r in busy)
    bookable = Span(max(window.start, now), window.end) if window.end > now else None
    if bookable is None:
        free: list[Span] = []
    elif duration is None:
        free = index.gaps(bookable)
    else:
        free = grid_slots(
            window=bookable,
            duration=duration,
            slot_minutes=calendar.slot_minutes,
            busy=index,
            limit=MAX_FREE_SLOTS,
        )
    return Availability(busy=busy, free_slots=free, version=version, server_time=now)


def reservation_group(*, workspace: Workspace, **lookup: Any) -> list[Reservation]:
    """All rows of one hold or booking in the workspace, primary first (empty if none)."""
    rows = Reservation.objects.filter(calendar__workspace=workspace, **lookup).select_related(
        "calendar", "agent"
    )
    return sorted(rows, key=lambda r: (not r.is_primary, r.calendar_id))


def server_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]
