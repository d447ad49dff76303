"""Free spans to offer instead of a refused (or displaced) one."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from agentcal.clock import isoformat_z, server_now
from agentcal.db import bound_cursor
from bookings.engine.statements import BUSY_NEAR_SQL
from bookings.models import Calendar
from bookings.spans import BusyIndex, Span, nearest_free
from bookings.sql import overlap_params

ALTERNATIVES_COUNT = 3
# Alternatives are searched this many slots either side of the request (a week of 30-minute slots).
ALTERNATIVES_MAX_STEPS = 336


def alternatives(
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
        cursor.execute(BUSY_NEAR_SQL, overlap_params([c.pk for c in calendars], window, now=now))
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
