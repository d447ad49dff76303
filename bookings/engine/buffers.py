"""The buffer rule in the write path: nothing live on a calendar within its buffer of the span.

Checked under the calendars' locks, after the takeover rules have judged what is in the span itself,
in one statement (statements.BUFFER_BLOCKER_SQL) and only when a calendar of the write has a buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agentcal.clock import isoformat_z
from agentcal.db import bound_cursor
from agentcal.errors import SlotConflict
from bookings.engine.statements import BUFFER_BLOCKER_SQL
from bookings.models import Calendar
from bookings.spans import Span, bucket_label
from bookings.sql import overlap_params, span_params


def check_buffers(
    calendars: Sequence[Calendar], span: Span, *, now: datetime, priority: int, moving: str | None = None
) -> None:
    """Raise the 409 (`conflicting.reason: "buffer"`) for the first thing inside a buffer, if any
    (`moving`: the hold id of a booking being moved, which is not in its own way)."""
    buffered = [c for c in calendars if c.buffer]
    if not buffered:
        return
    widest = max(c.buffer for c in buffered)
    params = overlap_params(
        [c.pk for c in buffered],
        span,
        buffers=[int(c.buffer.total_seconds()) for c in buffered],
        now=now,
        moving=moving,
        **span_params(Span(span.start - widest, span.end + widest), params="near_"),
    )
    with bound_cursor() as cursor:
        cursor.execute(BUFFER_BLOCKER_SQL, params)
        found = cursor.fetchone()
    if found is None:
        return
    start, end, kind, source, _calendar_id, calendar_public_id, slot_minutes, seconds = found
    conflicting = {
        "reason": "buffer",
        "calendar": calendar_public_id,
        "start_time": isoformat_z(start),
        "end_time": isoformat_z(end),
        "status": kind,
        "buffer_minutes": seconds // 60,
    }
    if source is not None:
        conflicting["source"] = source
    raise SlotConflict(
        f"The span comes within {seconds // 60} minutes of a {kind} {'block' if source else 'reservation'} "
        f"on calendar {calendar_public_id}, whose buffers keep that time free; no priority takes it over.",
        conflicting_bucket=bucket_label(start, slot_minutes),
        conflicting=conflicting,
        held_by_priority=None,
        caller_priority=priority,
        retryable=False,
    )
