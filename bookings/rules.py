"""Calendar rules as pure values and functions: weekly working hours, date overrides, buffers, notice.

`parse_rules` validates the API's JSON (`InvalidRules` names each bad field by its path); `open_spans`
says when a calendar is open, in UTC, from its hours in its own IANA zone; `closed_spans` is the rest of
a window, which a search subtracts as busy; `buffered` and `notice_start` are the other two rules. No
database here: the engine and the availability search feed these their calendars' rules.
docs/architecture.md ("Calendar rules") says what is decided here and why.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from types import MappingProxyType
from typing import Protocol
from zoneinfo import ZoneInfo

from agentcal.errors import InvalidRequest
from agentcal.text import storable_text
from bookings.spans import Span, merge

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # date.weekday()'s order
MINUTES_PER_DAY = 24 * 60
# A working day is one or two stretches, a split shift three or four; six leaves room while keeping a
# search's work at most six spans a day and the stored JSON small.
MAX_INTERVALS_PER_DAY = 6
# A year of exceptions ahead (holidays, short days, a weekend opened up) fits; more is a weekly schedule
# spelt out date by date, which the weekly hours are for.
MAX_DATE_OVERRIDES = 366
# Enough to show every mistake of a hand-written schedule without letting one request's garbage build an
# unbounded error document.
MAX_REPORTED_PROBLEMS = 50
_LABEL_CHARS = 40  # how much of a client's bad value an error message quotes

# Two digits each: "9:00" is refused rather than guessed at. "24:00" is the end of a day, nothing later.
_CLOCK_TIME = re.compile(r"(?:[01]\d|2[0-3]):[0-5]\d|24:00")
# Only the extended form: Python's date.fromisoformat() would also take "20261224" and week dates.
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

# Minutes after the local midnight, [start, end); end 1440 is "24:00".
Interval = tuple[int, int]
DayHours = tuple[Interval, ...]
ALL_DAY: DayHours = ((0, MINUTES_PER_DAY),)
ONE_DAY = timedelta(days=1)


class InvalidRules(InvalidRequest):
    """Every problem found in the rules, keyed by the path of the value at fault
    (`working_hours.mon[1]`, `date_overrides.2026-12-24`), as the API's `errors` member."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("The calendar rules are not valid; see `errors`.", errors=errors)
        self.errors = errors


@dataclass(frozen=True)
class WorkingHours:
    """A weekly schedule in the calendar's own zone: seven days' intervals, Monday first (`parse_rules`
    builds it from the API's JSON)."""

    by_weekday: tuple[DayHours, ...]

    def to_json(self) -> dict[str, list[list[str]]]:
        """Every weekday named, a closed one as `[]`, so what is shown back leaves nothing implied."""
        return {name: day_hours_json(day) for name, day in zip(WEEKDAYS, self.by_weekday, strict=True)}


@dataclass(frozen=True)
class CalendarRules:
    """When a calendar may be booked. No weekly hours means any time; an override replaces a date's hours."""

    working_hours: WorkingHours | None = None
    date_overrides: Mapping[date, DayHours] = field(default_factory=lambda: MappingProxyType({}))

    def hours_on(self, day: date) -> DayHours:
        """The day's intervals in local wall time: its override if it has one (even with no weekly
        hours: `[]` closes a holiday on an any-time calendar), else its weekday's hours."""
        override = self.date_overrides.get(day)
        if override is not None:
            return override
        if self.working_hours is None:
            return ALL_DAY
        return self.working_hours.by_weekday[day.weekday()]

    def date_overrides_json(self) -> dict[str, list[list[str]]]:
        return {day.isoformat(): day_hours_json(hours) for day, hours in sorted(self.date_overrides.items())}


def parse_rules(*, working_hours: object = None, date_overrides: object = None) -> CalendarRules:
    """The rules from the API's JSON (`null` or absent: no weekly hours, no overrides). Raises one
    `InvalidRules` listing every problem in both fields, so a client fixes them in one round."""
    problems = _Problems()
    hours = None if working_hours is None else _parse_working_hours(working_hours, problems)
    overrides = {} if date_overrides is None else _parse_date_overrides(date_overrides, problems)
    problems.raise_if_any()
    return CalendarRules(working_hours=hours, date_overrides=MappingProxyType(overrides))


# --- Open and closed time ---------------------------------------------------------------------------------


def open_spans(rules: CalendarRules, zone: str, window: Span) -> list[Span]:
    """The UTC spans inside `window` when the calendar is open, merged and in order.

    Each local date's intervals (its override, else its weekday's) become instants in `zone` through
    `first_instant_at`, so DST shifts them correctly; an interval ending at 24:00 meets the next date's
    00:00 at the same instant, and the merge joins them. O(days in window × intervals per day): the spans
    come out already in order, so the merge is one pass.
    """
    tz = zone_named(zone)
    start, end = window.start.astimezone(UTC), window.end.astimezone(UTC)
    # One date past the end: where a zone's clocks once went back across midnight (Antarctica/Casey,
    # 5 March 2010, 02:00 → 23:00 the day before), a moment can show a date again after the next date's
    # hours have begun. The clip below drops whatever falls outside the window.
    day = start.astimezone(tz).date()
    last = end.astimezone(tz).date() + ONE_DAY
    spans: list[Span] = []
    while day <= last:
        for opens, closes in rules.hours_on(day):
            span_start = max(first_instant_at(day, opens, tz), start)
            span_end = min(first_instant_at(day, closes, tz), end)
            if span_start < span_end:  # an interval wholly inside a DST gap never opens
                spans.append(Span(span_start, span_end))
        day += ONE_DAY
    return merge(spans)


@functools.lru_cache(maxsize=1024)
def zone_named(name: str) -> ZoneInfo:
    """ZoneInfo's own cache keeps only the 8 most recent zones strongly: a search across more zones
    would reload their tz files on every call."""
    return ZoneInfo(name)


def closed_spans(rules: CalendarRules, zone: str, window: Span) -> list[Span]:
    """The rest of `window` (UTC, in order): with `open_spans` it partitions the window exactly."""
    cursor, end = window.start.astimezone(UTC), window.end.astimezone(UTC)
    closed: list[Span] = []
    for span in open_spans(rules, zone, window):
        if span.start > cursor:
            closed.append(Span(cursor, span.start))
        cursor = span.end
    if cursor < end:
        closed.append(Span(cursor, end))
    return closed


def first_instant_at(day: date, minute: int, zone: ZoneInfo) -> datetime:
    """The first instant (UTC) at which the clock in `zone` shows `minute` past midnight on `day`, or later.

    For an ordinary time that is simply when it happens. When clocks go back, a repeated time is its
    first occurrence (fold=0): 01:30 in New York on 1 November 2026 is 01:30 EDT. When clocks go forward,
    a time that never happens resolves forward to the instant the clocks jump (02:30 in Berlin on
    29 March 2026 is 03:00 CEST), so the calendar is open exactly while its clock reads inside an
    interval — not 03:30, which would shift the whole gap's width of hours into the interval.
    """
    if minute == MINUTES_PER_DAY:
        day, minute = day + ONE_DAY, 0
    wall = datetime.combine(day, time(minute // 60, minute % 60))
    earlier = wall.replace(tzinfo=zone).astimezone(UTC)
    if earlier.astimezone(zone).replace(tzinfo=None) == wall:
        return earlier
    # In a gap: fold=0 and fold=1 read the wall time with the offsets either side of the jump, which
    # lands one before the jump and one after it (in whichever order); the jump lies between.
    other = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return _jump_between(min(earlier, other), max(earlier, other), zone)


def _jump_between(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The instant the zone's offset changes, `before` < it ≤ `after`. A bisection over whole seconds
    (tz data's transitions fall on whole seconds): ~12 steps for an hour's gap, met once a year or so."""
    offset_before = before.astimezone(zone).utcoffset()
    low, high = 0, int((after - before).total_seconds())
    while high - low > 1:
        middle = (low + high) // 2
        if (before + timedelta(seconds=middle)).astimezone(zone).utcoffset() == offset_before:
            low = middle
        else:
            high = middle
    return before + timedelta(seconds=high)


# --- Buffers and notice -----------------------------------------------------------------------------------


def buffered(span: Span, before: timedelta, after: timedelta) -> Span:
    """A reservation's span with its calendar's buffers: the time nothing else may take beside it."""
    if before < timedelta(0) or after < timedelta(0):
        raise ValueError("buffers are never negative")
    return Span(span.start - before, span.end + after)


def buffer_between(before_minutes: int, after_minutes: int) -> timedelta:
    """The least free time between any two things on a calendar (reservations and upstream busy time).

    The space after the earlier of two meetings is the space before the later one. Keeping both buffers
    around everything — the new reservation's own as well as those already there — means a gap of at
    least the larger of the two, whichever was booked first. Keeping only the existing ones' buffers
    (the narrower reading) would let the order of booking decide: a meeting booked just before another
    would get no after-buffer at all.
    """
    return timedelta(minutes=max(before_minutes, after_minutes))


def unavailable(
    rules: CalendarRules | None, zone: str, window: Span, *, now: datetime, min_notice_minutes: int
) -> list[Span]:
    """Where the rules alone close `window` (UTC, merged): outside the working hours and date overrides
    (`rules` None: none), and before the notice allows at `now`."""
    closed = closed_spans(rules, zone, window) if rules is not None else []
    earliest = notice_start(now, min_notice_minutes)
    if earliest > window.start:
        closed.append(Span(window.start, min(earliest, window.end)))
    return merge(closed)


class RuledCalendar(Protocol):
    """What the rules read of a calendar (bookings.models.Calendar has it)."""

    timezone: str
    min_notice_minutes: int

    @property
    def has_rules(self) -> bool: ...

    @property
    def rules(self) -> CalendarRules | None: ...

    @property
    def buffer(self) -> timedelta: ...


def closed_by_rules(calendar: RuledCalendar, window: Span, now: datetime) -> list[tuple[datetime, datetime]]:
    """What a calendar's working hours, date overrides and notice close in `window`, as (start, end)."""
    if not calendar.has_rules:
        return []
    notice = calendar.min_notice_minutes
    return [
        (s.start, s.end)
        for s in unavailable(calendar.rules, calendar.timezone, window, now=now, min_notice_minutes=notice)
    ]


def blocked_time(
    calendar: RuledCalendar, busy: Sequence[tuple[datetime, datetime]], window: Span, now: datetime
) -> list[tuple[datetime, datetime]]:
    """Everything that rules a calendar's time out in `window`: its busy time widened by its buffer,
    and what its rules close."""
    pad = calendar.buffer
    blocked = [(start - pad, end + pad) for start, end in busy] if pad else list(busy)
    return blocked + closed_by_rules(calendar, window, now)


def notice_start(now: datetime, min_notice_minutes: int) -> datetime:
    """The earliest start the calendar's notice allows, at `now` (the database's clock where it decides)."""
    if min_notice_minutes < 0:
        raise ValueError("notice is never negative")
    return now + timedelta(minutes=min_notice_minutes)


# --- Parsing ----------------------------------------------------------------------------------------------


class _Problems:
    """Messages by path, at most MAX_REPORTED_PROBLEMS paths; the rest counted under their field's name."""

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}
        self.unreported: dict[str, int] = {}

    def add(self, path: str, message: str) -> None:
        if path not in self.errors and len(self.errors) >= MAX_REPORTED_PROBLEMS:
            field_name = path.split(".", 1)[0]
            self.unreported[field_name] = self.unreported.get(field_name, 0) + 1
            return
        self.errors.setdefault(path, []).append(message)

    def raise_if_any(self) -> None:
        for field_name, count in self.unreported.items():
            self.errors.setdefault(field_name, []).append(f"{count} more problems not listed.")
        if self.errors:
            raise InvalidRules(self.errors)


def _parse_working_hours(value: object, problems: _Problems) -> WorkingHours:
    if not isinstance(value, Mapping):
        problems.add(
            "working_hours",
            'Must be an object of weekdays ("mon" … "sun") to lists of ["HH:MM", "HH:MM"] intervals, '
            "or null for any time.",
        )
        return WorkingHours(by_weekday=((),) * 7)
    for key in value:
        if key not in WEEKDAYS:
            problems.add(f"working_hours.{_label(key)}", f"Not a weekday: use {', '.join(WEEKDAYS)}.")
    # A weekday left out is closed: a schedule lists when the calendar is open, so one that names
    # Monday to Friday means "not at the weekend". Reading it as "any time" would make such a schedule
    # bookable all weekend, the very mistake working hours exist to prevent; closed fails safe (a slot
    # not offered, never a meeting at 3 a.m.). Any time is the whole field absent or null.
    days = tuple(
        _parse_day(value[name], f"working_hours.{name}", problems) if name in value else ()
        for name in WEEKDAYS
    )
    return WorkingHours(by_weekday=days)


def _parse_date_overrides(value: object, problems: _Problems) -> dict[date, DayHours]:
    if not isinstance(value, Mapping):
        problems.add(
            "date_overrides",
            'Must be an object of dates ("2026-12-24") to lists of ["HH:MM", "HH:MM"] intervals '
            "([] = closed that day), or null for none.",
        )
        return {}
    if len(value) > MAX_DATE_OVERRIDES:
        problems.add("date_overrides", f"At most {MAX_DATE_OVERRIDES} dates ({len(value)} given).")
        return {}
    overrides: dict[date, DayHours] = {}
    for key, hours in value.items():
        path = f"date_overrides.{_label(key)}"
        day = _parse_date(key)
        if day is None:
            problems.add(path, "Not a date: use YYYY-MM-DD.")
            continue
        overrides[day] = _parse_day(hours, path, problems)
    return overrides


def _parse_date(key: object) -> date | None:
    if not isinstance(key, str) or not _ISO_DATE.fullmatch(key):
        return None
    try:
        return date.fromisoformat(key)
    except ValueError:  # 2026-02-30 and the like
        return None


def _parse_day(value: object, path: str, problems: _Problems) -> DayHours:
    if not isinstance(value, list | tuple):
        problems.add(path, 'Must be a list of ["HH:MM", "HH:MM"] intervals ([] = closed).')
        return ()
    if value and all(isinstance(item, str) for item in value):
        # The likely slip, one pair not wrapped in its list: said once, not once per string.
        problems.add(path, 'Must be a list of intervals: [["09:00", "17:00"]], not ["09:00", "17:00"].')
        return ()
    if len(value) > MAX_INTERVALS_PER_DAY:
        problems.add(path, f"At most {MAX_INTERVALS_PER_DAY} intervals a day ({len(value)} given).")
        return ()
    day = path.rsplit(".", 1)[-1]
    taken: list[tuple[int, Interval]] = []
    for index, pair in enumerate(value):
        interval = _parse_interval(pair, f"{path}[{index}]", problems)
        if interval is None:
            continue
        # Refused, not merged: an overlap or a list out of order is nearly always a typo (12:30 for
        # 13:30), which merging would hide; and what is stored is shown back exactly as it was sent.
        # Intervals that only touch are fine: half-open, they do not overlap.
        if taken and interval[0] < taken[-1][1][1]:
            earlier_index, earlier = taken[-1]
            clash = "comes before" if interval[1] <= earlier[0] else "overlaps"
            problems.add(
                f"{path}[{index}]",
                f"{_pair(interval)} {clash} {day}[{earlier_index}] {_pair(earlier)}: "
                "list a day's intervals in order, without overlap.",
            )
            continue
        taken.append((index, interval))
    return tuple(interval for _, interval in taken)


def _parse_interval(pair: object, path: str, problems: _Problems) -> Interval | None:
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        problems.add(path, 'Must be a ["HH:MM", "HH:MM"] pair.')
        return None
    start, end = (_minutes(text) for text in pair)
    bad = [
        _label(text, quoted=True) for text, minutes in zip(pair, (start, end), strict=True) if minutes is None
    ]
    if bad:
        problems.add(path, f'{" and ".join(bad)}: not a time; use "HH:MM", "00:00" to "24:00".')
        return None
    assert start is not None and end is not None
    if start == end:
        problems.add(path, f"Starts and ends at {_clock(start)}: an interval must have a length.")
        return None
    if start > end:
        problems.add(
            path,
            f"Starts at {_clock(start)}, after its end {_clock(end)}. For hours past midnight, end this "
            'interval at "24:00" and start the next day at "00:00".',
        )
        return None
    return start, end


def _minutes(text: object) -> int | None:
    if not isinstance(text, str) or not _CLOCK_TIME.fullmatch(text):
        return None
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _pair(interval: Interval) -> str:
    return f'["{_clock(interval[0])}", "{_clock(interval[1])}"]'


def day_hours_json(hours: DayHours) -> list[list[str]]:
    return [[_clock(start), _clock(end)] for start, end in hours]


def _label(value: object, *, quoted: bool = False) -> str:
    """A client's value as an error may quote it (as JSON, or a bare string): storable, one line, clipped."""
    text = (
        value
        if isinstance(value, str) and not quoted
        else json.dumps(value, ensure_ascii=False, default=repr)
    )
    clipped = storable_text(text, _LABEL_CHARS) + ("…" if len(text) > _LABEL_CHARS else "")
    return "".join(char if char.isprintable() else "?" for char in clipped)
