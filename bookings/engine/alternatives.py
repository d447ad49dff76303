"""Free spans to offer instead of a refused (or displaced) one."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from agentcal.clock import isoformat_z, server_now
from agentcal.db import bound_cursor
from bookings.engine.statements import BUSY_NEAR_SQL
from bookings.models import Calendar
from bookings.rules import closed_by_rules
from bookings.spans import BusyIndex, Span, nearest_free
from bookings.sql import overlap_params

ALTERNATIVES_COUNT = 3
# Alternatives are searched this many slots either side of the request (a week of 30-minute slots).
ALTERNATIVES_MAX_STEPS = 336


def search_window(calendars: Sequence[Calendar], span: Span) -> Span:
    """Where alternatives are looked for: ALTERNATIVES_MAX_STEPS slots either side of the request."""
    reach = timedelta(minutes=calendars[0].slot_minutes * ALTERNATIVES_MAX_STEPS)
    return Span(span.start - reach, span.end + reach)


def alternatives(
    calendars: Sequence[Calendar],
    span: Span,
    *,
    now: datetime | None = None,
    busy_near: Iterable[Span] | None = None,
) -> list[dict[str, str]]:
    """Up to 3 free spans of the same length on every requested calendar, nearest first, that its rules
    allow. `now` is the database time the caller already read, if it did, and `busy_near` what is busy
    in search_window() at that time, if the caller read it too (the loser path then needs no round
    trip here)."""
    slot_minutes = calendars[0].slot_minutes
    if busy_near is None or now is None:
        if now is None:
            now = server_now()
        with bound_cursor() as cursor:
            cursor.execute(
                BUSY_NEAR_SQL,
                overlap_params([c.pk for c in calendars], search_window(calendars, span), now=now),
            )
            busy_near = [Span(start, end) for start, end in cursor.fetchall()]
    busy = BusyIndex(_with_rules(calendars, search_window(calendars, span), busy_near, now=now))
    found = nearest_free(
        requested=span,
        busy=busy,
        slot_minutes=slot_minutes,
        not_before=now,
        count=ALTERNATIVES_COUNT,
        max_steps=ALTERNATIVES_MAX_STEPS,
    )
    return [{"start_time": isoformat_z(s.start), "end_time": isoformat_z(s.end)} for s in found]


def _with_rules(
    calendars: Sequence[Calendar], window: Span, busy: Iterable[Span], *, now: datetime
) -> list[Span]:
    """What is busy, with the calendars' rules: busy time widened by the largest buffer among them (the
    busy spans are not told apart by calendar: an alternative may be passed over, never wrongly
    offered), and the time their hours and notice close."""
    ruled = [c for c in calendars if c.has_rules]
    if not ruled:
        return list(busy)
    widest = max(c.buffer for c in ruled)
    closed = [Span(start, end) for c in ruled for start, end in closed_by_rules(c, window, now)]
    return [Span(b.start - widest, b.end + widest) for b in busy] + closed
