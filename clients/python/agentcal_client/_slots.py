"""find_free_slot's arithmetic: the earliest span free in every calendar, from each one's free time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from agentcal_client.models import Slot


def check_search(calendars: Sequence[str], duration: timedelta, start: datetime, end: datetime) -> None:
    if isinstance(calendars, str) or not calendars:
        raise ValueError("find_free_slot: pass a list of one or more calendar ids")
    if duration <= timedelta(0):
        raise ValueError("find_free_slot: duration must be positive")
    if end <= start:
        raise ValueError("find_free_slot: end must be after start")


def intersect(left: Sequence[Slot], right: Sequence[Slot]) -> list[Slot]:
    """The spans free in both lists (each sorted, non-overlapping, half-open)."""
    common: list[Slot] = []
    i = j = 0
    while i < len(left) and j < len(right):
        start = max(left[i].start_time, right[j].start_time)
        end = min(left[i].end_time, right[j].end_time)
        if start < end:
            common.append(Slot(start_time=start, end_time=end))
        # Drop whichever ends first: it cannot overlap anything later in the other list.
        if left[i].end_time <= right[j].end_time:
            i += 1
        else:
            j += 1
    return common


def first_fit(free_per_calendar: Sequence[Sequence[Slot]], duration: timedelta) -> Slot | None:
    """The earliest span of `duration` inside time free in every calendar. Starts are rounded up to the
    whole minute: a gap can begin at the server's "now", and a start already past is refused."""
    common = list(free_per_calendar[0])
    for free in free_per_calendar[1:]:
        common = intersect(common, free)
    for gap in common:
        start = _ceil_minute(gap.start_time)
        if start + duration <= gap.end_time:
            return Slot(start_time=start, end_time=start + duration)
    return None


def _ceil_minute(moment: datetime) -> datetime:
    floored = moment.replace(second=0, microsecond=0)
    return floored if floored == moment else floored + timedelta(minutes=1)
