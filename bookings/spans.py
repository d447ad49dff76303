"""Time spans, slot buckets and free-slot search: pure functions, no database."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from agentcal.clock import isoformat_z

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_BUCKETS = 99


@dataclass(frozen=True)
class Span:
    """A half-open interval [start, end) of aware datetimes."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("span bounds must be timezone-aware")

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    @property
    def minutes(self) -> int:
        return math.ceil(self.duration.total_seconds() / 60)

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end

    def shifted(self, delta: timedelta) -> Span:
        return Span(self.start + delta, self.end + delta)


def bucket_start(moment: datetime, slot_minutes: int) -> datetime:
    """The start of the `slot_minutes` bucket (aligned to the Unix epoch, in UTC) containing `moment`."""
    slot_seconds = slot_minutes * 60
    seconds = (moment - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=math.floor(seconds / slot_seconds) * slot_seconds)


def buckets_touched(span: Span, slot_minutes: int) -> int:
    first = bucket_start(span.start, slot_minutes)
    last = bucket_start(span.end - timedelta(microseconds=1), slot_minutes)
    return int((last - first).total_seconds() // (slot_minutes * 60)) + 1


def bucket_label(moment: datetime, slot_minutes: int) -> str:
    return "BUCKET#" + isoformat_z(bucket_start(moment, slot_minutes))


def merge(spans: Iterable[Span]) -> list[Span]:
    return [Span(start, end) for start, end in merge_bounds((s.start, s.end) for s in spans)]


def merge_bounds(bounds: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """merge() of (start, end) pairs: tuples sort and compare in C, and no Span is built per input."""
    merged: list[tuple[datetime, datetime]] = []
    for start, end in sorted(bounds):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


class BusyIndex:
    """Answers "is this span free?" in O(log n) over merged busy spans."""

    def __init__(self, busy: Iterable[Span]) -> None:
        self._set(merge_bounds((s.start, s.end) for s in busy))

    @classmethod
    def from_bounds(cls, bounds: Iterable[tuple[datetime, datetime]]) -> BusyIndex:
        """The index of (start, end) pairs of aware datetimes (rows as read from the database)."""
        index = cls.__new__(cls)
        index._set(merge_bounds(bounds))
        return index

    def _set(self, merged: list[tuple[datetime, datetime]]) -> None:
        self._starts = [start for start, _ in merged]
        self._ends = [end for _, end in merged]

    def is_free(self, span: Span) -> bool:
        # The only merged span that can overlap is the last one starting before span.end.
        i = bisect.bisect_left(self._starts, span.end) - 1
        return i < 0 or self._ends[i] <= span.start

    def gaps(self, window: Span) -> list[Span]:
        free: list[Span] = []
        cursor = window.start
        for start, end in zip(self._starts, self._ends, strict=True):
            if end <= cursor or start >= window.end:
                continue
            if start > cursor:
                free.append(Span(cursor, start))
            cursor = max(cursor, end)
        if cursor < window.end:
            free.append(Span(cursor, window.end))
        return free


def grid_slots(
    *, window: Span, duration: timedelta, slot_minutes: int, busy: BusyIndex, limit: int
) -> list[Span]:
    """Free slots of `duration` starting on the slot grid inside `window`, earliest first."""
    step = timedelta(minutes=slot_minutes)
    start = bucket_start(window.start, slot_minutes)
    if start < window.start:
        start += step
    slots: list[Span] = []
    while start + duration <= window.end and len(slots) < limit:
        candidate = Span(start, start + duration)
        if busy.is_free(candidate):
            slots.append(candidate)
        start += step
    return slots


def nearest_free(
    *, requested: Span, busy: BusyIndex, slot_minutes: int, not_before: datetime, count: int, max_steps: int
) -> list[Span]:
    """Up to `count` free spans of the requested length, shifted by whole slots, nearest first.

    Candidates alternate later/earlier (+1, -1, +2, -2 slots …) so the agent gets the closest options;
    anything starting before `not_before` (the database's now) is skipped.
    """
    step = timedelta(minutes=slot_minutes)
    found: list[Span] = []
    for k in range(1, max_steps + 1):
        for direction in (1, -1):
            candidate = requested.shifted(step * k * direction)
            if candidate.start >= not_before and busy.is_free(candidate):
                found.append(candidate)
                if len(found) == count:
                    return found
    return found
