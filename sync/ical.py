"""iCalendar in and out for upstream sync.

One upstream resource is one .ics body: a VCALENDAR holding the VEVENTs of one UID (a master and
any overrides with RECURRENCE-ID). `busy_intervals` turns it into the spans that block agents,
`event_version` into what tells a changed resource from an unchanged one, and `booking_ics` writes
one of AgentCal's own bookings upstream in a form `agentcal_booking_id` recognises on its way back.
Pure functions: no Django, no database.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import recurring_ical_events
from dateutil.rrule import rrulestr

PRODID = "-//AgentCal//AgentCal//EN"
BOOKING_PROPERTY = "X-AGENTCAL-BOOKING"
# Occurrences of one resource inside the queried window, whatever the budget: an hourly series over the
# longest window (~400 days) still fits.
MAX_OCCURRENCES = 10_000
# What expanding a recurring event costs, in steps: the expansion walks every instance of each RRULE from
# its DTSTART to the window's end (for an hourly or minutely rule, every hour or minute, even those its
# BYxxx parts skip), a step each (~3 µs), and builds an occurrence for each instance in the window, which
# costs as much as some fifty steps (more in a zone with DST rules). A FREQ=MINUTELY rule over a 180-day
# window is 260,000 instances: seconds of work for one event, which the budget refuses before it starts.
STEPS_PER_OCCURRENCE = 50
# An hour, minute or second that an hourly (minutely, secondly) rule's BYxxx parts leave out is skipped
# in a tenth of a step.
PERIODS_PER_STEP = 10
# The budget of one event when the caller gives none (sync.ingest passes SYNC_EXPANSION_STEPS_PER_EVENT).
DEFAULT_STEPS_PER_EVENT = 250_000
_SUB_DAILY = {
    "HOURLY": timedelta(hours=1),
    "MINUTELY": timedelta(minutes=1),
    "SECONDLY": timedelta(seconds=1),
}
# Day parts that may keep no day for years (or ever), and every part that selects days.
_RARE_DAY_PARTS = ("BYMONTHDAY", "BYYEARDAY", "BYWEEKNO")
_DAY_PARTS = ("BYMONTH", *_RARE_DAY_PARTS, "BYDAY", "WKST")
# A 400-year Gregorian cycle that ends where dateutil stops (year 9999).
_CYCLE_START = datetime(9600, 1, 1)  # noqa: DTZ001 - wall clock on purpose
# The expansion compares floating times and all-day dates as if they were UTC. A day either side
# covers every real UTC offset; the exact window is applied after conversion.
QUERY_MARGIN = timedelta(days=1)


class InvalidCalendarData(ValueError):
    """The upstream resource cannot be read as one event (series): the sync skips it, loudly."""


class ExpansionCutShort(Exception):
    """The event's recurrence would cost more to expand than its budget allows: instead of its
    occurrences, `intervals` block the series' whole span in the window (from its first start, or the
    window's, to its UNTIL or the window's end) and each moved occurrence, so that nobody books into an
    occurrence that was never computed. The message says why, for the people who look."""

    def __init__(self, why: str, intervals: list[BusyInterval]) -> None:
        super().__init__(why)
        self.intervals = intervals


@dataclass
class ExpansionBudget:
    """The expansion steps (see STEPS_PER_OCCURRENCE) one sync may still spend, and one event at most.
    Spent as events are expanded; an event that would exceed what is left is cut short, and what its
    cheap walk cost is still spent, so the sync's total stays bounded however many such events come."""

    per_event: int = DEFAULT_STEPS_PER_EVENT
    left: int = sys.maxsize

    def allowance(self) -> int:
        return max(0, min(self.per_event, self.left))

    def spend(self, steps: int) -> None:
        self.left -= steps


class _TooCostly(Exception):
    def __init__(self, why: str, walked: int) -> None:
        super().__init__(why)
        self.walked = walked


@dataclass(frozen=True)
class EventVersion:
    uid: str
    sequence: int
    modified: datetime | None


@dataclass(frozen=True)
class BusyInterval:
    start: datetime
    end: datetime
    # The occurrence's original start (its RECURRENCE-ID) in UTC, its date for an all-day series, ""
    # for a non-recurring event: stays the same when the occurrence is moved, so it identifies the
    # occurrence across syncs.
    occurrence: str


def event_version(data: str | bytes) -> EventVersion:
    """The UID, the highest SEQUENCE and the latest LAST-MODIFIED (else DTSTAMP) of the resource."""
    with _invalid_data("cannot read the event's version"):
        _, events = _parse(data)
        stamps = [event.last_modified for event in events]
        return EventVersion(
            uid=str(events[0]["UID"]),
            sequence=max(event.sequence for event in events),
            modified=max((stamp.astimezone(UTC) for stamp in stamps if stamp is not None), default=None),
        )


def busy_intervals(
    data: str | bytes,
    *,
    window_start: datetime,
    window_end: datetime,
    calendar_tz: str,
    attendee_addresses: frozenset[str] = frozenset(),
    budget: ExpansionBudget | None = None,
) -> list[BusyInterval]:
    """Every occurrence of the resource that overlaps [window_start, window_end) and makes its owner busy.

    Recurrences are expanded (RRULE, RDATE, EXDATE, overrides, DST in the event's zone). An
    occurrence does not block when it is transparent, cancelled, or declined by one of
    `attendee_addresses` (the calendar owner's). All-day dates and floating times are read in
    `calendar_tz`. Intervals are whole occurrences, sorted, never merged or clipped.

    Expanding spends `budget` (one event's default when None); a recurrence that would cost more
    raises ExpansionCutShort, which carries the conservative intervals to block instead.
    """
    zone = ZoneInfo(calendar_tz)  # outside the data guard: a bad zone name is the caller's mistake
    window_start = _aware(window_start, "window_start").astimezone(UTC)
    window_end = _aware(window_end, "window_end").astimezone(UTC)
    own_addresses = {_address(address) for address in attendee_addresses}
    budget = budget if budget is not None else ExpansionBudget()
    intervals = []
    with _invalid_data("cannot expand the event"):
        calendar, events = _parse(data)
        _shorten_negative_lengths(events, zone)
        recurring = any(name in event for event in events for name in ("RRULE", "RDATE", "RECURRENCE-ID"))
        try:
            steps = _expansion_cost(events, window_start, window_end, allowance=budget.allowance())
        except _TooCostly as too_costly:
            budget.spend(too_costly.walked)
            raise _cut_short(str(too_costly), events, zone, window_start, window_end, own_addresses) from None
        budget.spend(steps)
        occurrences = recurring_ical_events.of(calendar).between(
            window_start - QUERY_MARGIN, window_end + QUERY_MARGIN
        )
        if len(occurrences) > MAX_OCCURRENCES:
            why = f"too many occurrences in the window: {len(occurrences)}"
            raise _cut_short(why, events, zone, window_start, window_end, own_addresses)
        for occurrence in occurrences:
            start = _to_utc(occurrence["DTSTART"].dt, zone)
            end = _to_utc(occurrence["DTEND"].dt, zone)
            # An event without an end takes no time.
            if not (start < end and start < window_end and end > window_start):
                continue
            if _blocks(occurrence, own_addresses):
                key = _occurrence_key(occurrence["RECURRENCE-ID"].dt, zone) if recurring else ""
                intervals.append(BusyInterval(start=start, end=end, occurrence=key))
    return sorted(intervals, key=lambda interval: (interval.start, interval.end, interval.occurrence))


def booking_ics(
    *,
    uid: str,
    start: datetime,
    end: datetime,
    summary: str,
    description: str,
    sequence: int,
    stamp: datetime,
    booking_id: str,
) -> str:
    """The resource AgentCal writes upstream for one of its bookings, with CRLF line endings."""
    start_utc = _aware(start, "start").astimezone(UTC)
    end_utc = _aware(end, "end").astimezone(UTC)
    if end_utc <= start_utc:
        raise ValueError(f"a booking must end after it starts: {start_utc} .. {end_utc}")
    stamp_utc = _aware(stamp, "stamp").astimezone(UTC)
    event = icalendar.Event()
    event.add("UID", uid)
    event.add("DTSTAMP", stamp_utc)
    event.add("LAST-MODIFIED", stamp_utc)
    event.add("SEQUENCE", sequence)
    event.add("DTSTART", start_utc)
    event.add("DTEND", end_utc)
    event.add("SUMMARY", summary)
    event.add("DESCRIPTION", description)
    event.add("STATUS", "CONFIRMED")
    event.add("TRANSP", "OPAQUE")
    # Lets the next sync recognise its own write coming back, so it does not block its own booking.
    event.add(BOOKING_PROPERTY, booking_id)
    calendar = icalendar.Calendar()
    calendar.add("PRODID", PRODID)
    calendar.add("VERSION", "2.0")
    calendar.add_component(event)
    return bytes(calendar.to_ical()).decode()


def agentcal_booking_id(data: str | bytes) -> str | None:
    """The AgentCal booking this resource was written for, None for anyone else's event."""
    with _invalid_data("cannot read the event"):
        for event in _parse(data)[1]:
            for value in _values(event, BOOKING_PROPERTY):
                return str(value)
    return None


@contextmanager
def _invalid_data(context: str) -> Iterator[None]:
    """Report every failure on upstream data as InvalidCalendarData.

    The data is arbitrary and the parsing libraries fail on it with ValueError, KeyError,
    TypeError and more; callers should need to handle exactly one error.
    """
    try:
        yield
    except (InvalidCalendarData, ExpansionCutShort):
        raise
    except Exception as error:
        detail = f"missing {error}" if isinstance(error, KeyError) else str(error)
        raise InvalidCalendarData(f"{context}: {detail}") from error


def _parse(data: str | bytes) -> tuple[icalendar.Calendar, list[icalendar.Event]]:
    """The calendar and its VEVENTs, checked to be one event: a single UID, only known time zones."""
    calendar = icalendar.Calendar.from_ical(data)
    if not isinstance(calendar, icalendar.Calendar):
        raise InvalidCalendarData(f"expected a VCALENDAR, got {calendar.name}")
    events = calendar.events
    if not events:
        raise InvalidCalendarData("no VEVENT in the resource")
    uids = {str(event.get("UID", "")) for event in events}
    if "" in uids:
        raise InvalidCalendarData("a VEVENT has no UID")
    if len(uids) > 1:
        raise InvalidCalendarData(f"one resource holds several UIDs: {', '.join(sorted(uids))}")
    for event in events:
        for name in ("DTSTART", "DTEND", "RECURRENCE-ID", "EXDATE", "RDATE"):
            for prop in _values(event, name):
                # icalendar leaves a time with an unknown TZID naive, which would pass for floating.
                tzid = prop.params.get("TZID")
                if tzid and any(_is_naive(value.dt) for value in getattr(prop, "dts", [prop])):
                    raise InvalidCalendarData(f"unknown time zone {tzid!r} in {name}")
    return calendar, events


def _expansion_cost(
    events: list[icalendar.Event], window_start: datetime, window_end: datetime, *, allowance: int
) -> int:
    """What expanding the resource's recurrence rules will cost, in steps, walking each rule lazily up to
    the window's end; _TooCostly (with the steps walked so far) as soon as it would exceed `allowance`,
    before the expansion itself starts.

    An hourly, minutely or secondly rule is walked hour by hour (minute, second) whatever its BYxxx parts
    keep, so its cost grows with the periods from DTSTART to its UNTIL or the window's end; when that is
    over the allowance it is refused without walking at all.

    The walk goes on, day by day, until a day its BYMONTHDAY, BYYEARDAY or BYWEEKNO parts keep: one that
    keeps none (the 30th of February) would be walked to the year 9999. Such a rule gives no occurrence
    but DTSTART, so it is dropped from the event; one whose next day is too far off is refused.
    """
    # Naive wall-clock times throughout: the counts need not be exact to the hour.
    window_first = (window_start - QUERY_MARGIN).replace(tzinfo=None)
    window_last = (window_end + QUERY_MARGIN).replace(tzinfo=None)
    steps = 0
    for event in events:
        rules = _values(event, "RRULE")
        never = []
        for rule in rules:
            rule_text = bytes(rule.to_ical()).decode()
            if "FREQ=" not in rule_text.upper():
                raise InvalidCalendarData(f"malformed RRULE:{rule_text}: no FREQ")
            start = event.start
            if isinstance(start, datetime):
                dtstart = start.replace(tzinfo=None)
            else:
                dtstart = datetime.combine(start, time())  # noqa: DTZ001 - wall clock on purpose
            try:
                instances = rrulestr(rule_text, dtstart=dtstart, ignoretz=True, cache=False)
            except ValueError as error:
                raise InvalidCalendarData(f"malformed RRULE:{rule_text}: {error}") from error
            too_costly = f"expanding RRULE:{rule_text} from {dtstart:%Y-%m-%d %H:%M} costs too much"
            days = _kept_days(rule_text)
            if days is not None:
                # The Gregorian calendar repeats every 400 years: no day kept in 9600-9999, none ever.
                if next(iter(rrulestr(days, dtstart=_CYCLE_START, cache=False)), None) is None:
                    never.append(rule)
                    continue
                until = _naive_until(rule)
                walk_to = max(dtstart, min(until, window_last) if until is not None else window_last)
                following = next(iter(rrulestr(days, dtstart=walk_to, cache=False)), None)
                if following is None or steps + (following - dtstart).days > allowance:
                    raise _TooCostly(too_costly, steps)
            period = _SUB_DAILY.get(str((rule.get("FREQ") or [""])[0]).upper())
            if period is not None:
                period *= int((rule.get("INTERVAL") or [1])[0])
                until = _naive_until(rule)
                walk_end = min(until, window_last) if until is not None else window_last
                # Without COUNT the walk goes on to its end whatever matches: known before it starts.
                # Without BYxxx parts every period is an instance, a whole step.
                filtered = any(name.startswith("BY") for name in rule)
                periods = (walk_end - dtstart) / period / (PERIODS_PER_STEP if filtered else 1)
                if not rule.get("COUNT") and steps + periods > allowance:
                    raise _TooCostly(too_costly, steps)
            walked = in_window = 0
            for yielded, instance in enumerate(instances, start=1):
                walked = yielded
                if period is not None:
                    walked = max(yielded, int((instance - dtstart) / period) // PERIODS_PER_STEP)
                in_window += window_first <= instance < window_last
                if steps + walked + in_window * STEPS_PER_OCCURRENCE > allowance:
                    raise _TooCostly(too_costly, steps + walked)
                if instance >= window_last:
                    break
            steps += walked + in_window * STEPS_PER_OCCURRENCE
        if never:
            kept = [rule for rule in rules if rule not in never]
            event.pop("RRULE")
            if kept:
                event["RRULE"] = kept if len(kept) > 1 else kept[0]
    return steps


def _kept_days(rule_text: str) -> str | None:
    """A yearly rule keeping the days `rule_text` keeps, when its day parts may keep none for a long
    while (BYMONTHDAY, BYYEARDAY, BYWEEKNO); walked a year at a time, it finds the next such day fast.
    None when no such part is there, or when the rule walks by month or year anyway."""
    parts = dict(part.split("=", 1) for part in rule_text.upper().split(";") if "=" in part)
    if parts.get("FREQ") == "YEARLY" or not any(parts.get(name) for name in _RARE_DAY_PARTS):
        return None
    if parts.get("FREQ") == "MONTHLY" and any(char.isdigit() for char in parts.get("BYDAY", "")):
        return None  # "the first Monday" means another day in a yearly rule
    kept = {name: parts[name] for name in _DAY_PARTS if parts.get(name)}
    if "BYDAY" in kept:
        # Below monthly, "1MO" is any Monday (as dateutil reads it); yearly, it is the year's first.
        kept["BYDAY"] = ",".join(day.lstrip("+-0123456789") for day in kept["BYDAY"].split(","))
    return "FREQ=YEARLY;" + ";".join(f"{name}={value}" for name, value in kept.items())


def _naive_until(rule: Any) -> datetime | None:
    """The rule's UNTIL as a naive wall-clock time (a date: the end of that day), None without one."""
    values = rule.get("UNTIL") or []
    if not values:
        return None
    until = values[0]
    if not isinstance(until, datetime):
        return datetime.combine(until + timedelta(days=1), time())  # noqa: DTZ001 - wall clock on purpose
    return until.replace(tzinfo=None)


def _until_utc(rule: Any, start: date | datetime, zone: ZoneInfo) -> datetime | None:
    """The rule's UNTIL as an instant (a date: the end of that day; a floating time: in DTSTART's zone)."""
    values = rule.get("UNTIL") or []
    if not values:
        return None
    until = values[0]
    if not isinstance(until, datetime):
        until = datetime.combine(until + timedelta(days=1), time())  # noqa: DTZ001 - made aware below
    if until.tzinfo is None and isinstance(start, datetime) and start.tzinfo is not None:
        until = until.replace(tzinfo=start.tzinfo)
    return _to_utc(until, zone)


def _cut_short(
    why: str,
    events: list[icalendar.Event],
    zone: ZoneInfo,
    window_start: datetime,
    window_end: datetime,
    own_addresses: set[str],
) -> ExpansionCutShort:
    """What blocks when the expansion is cut short: each series' whole span in the window, from its first
    start to the end of its last possible occurrence (its UNTIL plus its length; the window's end when it
    has no UNTIL, has a COUNT that was not walked, or RDATEs), and each moved occurrence as it is.
    Conservative on purpose: an occurrence that was never computed must not be bookable."""
    intervals = []
    for event in events:
        if not _blocks(event, own_addresses):
            continue
        first = _value(event, "DTSTART")
        start = _to_utc(first, zone)
        length = _length(event, zone)
        if length <= timedelta(0):
            continue  # its occurrences take no time
        if "RECURRENCE-ID" in event:
            end = start + length
        else:
            end = window_end
            untils = [_until_utc(rule, first, zone) for rule in _values(event, "RRULE")]
            if untils and "RDATE" not in event and all(until is not None for until in untils):
                end = min(window_end, max(until for until in untils if until is not None) + length)
        start, end = max(start, window_start), min(end, window_end)
        if start < end:
            intervals.append(BusyInterval(start=start, end=end, occurrence=""))
    return ExpansionCutShort(
        f"{why}; blocking its whole span instead", sorted(intervals, key=lambda i: (i.start, i.end))
    )


def _length(event: icalendar.Event, zone: ZoneInfo) -> timedelta:
    """An occurrence's length: DTEND - DTSTART, else DURATION, else a day (a date) or nothing (a time)."""
    start = _value(event, "DTSTART")
    if "DTEND" in event:
        return _to_utc(_value(event, "DTEND"), zone) - _to_utc(start, zone)
    if "DURATION" in event:
        duration: timedelta = _value(event, "DURATION")
        return duration
    return timedelta(0) if isinstance(start, datetime) else timedelta(days=1)


def _value(component: icalendar.Component, name: str) -> Any:
    """A date, time or duration property's value (the parsing checked it is there)."""
    prop: Any = component.get(name)
    return prop.dt


def _shorten_negative_lengths(events: list[icalendar.Event], zone: ZoneInfo) -> None:
    """Make an event that ends before it starts zero-length, so that it takes no time.

    The expansion library would swap its start and end instead, and block the span in between.
    """
    for event in events:
        start, end, duration = event.get("DTSTART"), event.get("DTEND"), event.get("DURATION")
        if start is None:
            continue
        if (end is not None and _to_utc(end.dt, zone) < _to_utc(start.dt, zone)) or (
            end is None and duration is not None and duration.dt < timedelta(0)
        ):
            event.pop("DURATION", None)
            event["DTEND"] = start


def _blocks(occurrence: icalendar.Component, own_addresses: set[str]) -> bool:
    if str(occurrence.get("TRANSP", "")).upper() == "TRANSPARENT":
        return False
    if str(occurrence.get("STATUS", "")).upper() == "CANCELLED":
        return False
    return not any(
        _address(str(attendee)) in own_addresses
        and str(attendee.params.get("PARTSTAT", "")).upper() == "DECLINED"
        for attendee in _values(occurrence, "ATTENDEE")
    )


def _to_utc(value: date | datetime, zone: ZoneInfo) -> datetime:
    """An instant in UTC; a date is its midnight and a floating time its wall clock in `zone`."""
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(), tzinfo=zone)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(UTC)


def _occurrence_key(original_start: date | datetime, zone: ZoneInfo) -> str:
    if not isinstance(original_start, datetime):
        # An all-day series: the date itself, which does not move if the calendar's zone changes.
        return original_start.isoformat()
    return _to_utc(original_start, zone).isoformat()


def _values(component: icalendar.Component, name: str) -> list[Any]:
    """A property that may occur several times, always as a list."""
    value = component.get(name)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _address(address: str) -> str:
    return address.strip().lower().removeprefix("mailto:")


def _is_naive(value: object) -> bool:
    return isinstance(value, datetime) and value.tzinfo is None


def _aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} must be timezone-aware, got {value}")
    return value
