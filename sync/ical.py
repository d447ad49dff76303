"""iCalendar in and out for upstream sync.

One upstream resource is one .ics body: a VCALENDAR holding the VEVENTs of one UID (a master and
any overrides with RECURRENCE-ID). `busy_intervals` turns it into the spans that block agents,
`event_version` into what tells a changed resource from an unchanged one, and `booking_ics` writes
one of AgentCal's own bookings upstream in a form `agentcal_booking_id` recognises on its way back.
Pure functions: no Django, no database.
"""

from __future__ import annotations

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
# Occurrences of one resource inside the queried window: an hourly series over the longest window
# (~400 days) still fits.
MAX_OCCURRENCES = 10_000
# Instances of one RRULE between its DTSTART and the window's end: the expansion walks all of them,
# so a FREQ=MINUTELY rule started a few years ago costs minutes even for a one-week window.
MAX_RULE_INSTANCES = 100_000
# The expansion compares floating times and all-day dates as if they were UTC. A day either side
# covers every real UTC offset; the exact window is applied after conversion.
QUERY_MARGIN = timedelta(days=1)


class InvalidCalendarData(ValueError):
    """The upstream resource cannot be read as one event (series): the sync skips it, loudly."""


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
) -> list[BusyInterval]:
    """Every occurrence of the resource that overlaps [window_start, window_end) and makes its owner busy.

    Recurrences are expanded (RRULE, RDATE, EXDATE, overrides, DST in the event's zone). An
    occurrence does not block when it is transparent, cancelled, or declined by one of
    `attendee_addresses` (the calendar owner's). All-day dates and floating times are read in
    `calendar_tz`. Intervals are whole occurrences, sorted, never merged or clipped.
    """
    zone = ZoneInfo(calendar_tz)  # outside the data guard: a bad zone name is the caller's mistake
    window_start = _aware(window_start, "window_start").astimezone(UTC)
    window_end = _aware(window_end, "window_end").astimezone(UTC)
    own_addresses = {_address(address) for address in attendee_addresses}
    intervals = []
    with _invalid_data("cannot expand the event"):
        calendar, events = _parse(data)
        _check_expansion_cost(events, window_start, window_end)
        _shorten_negative_lengths(events, zone)
        recurring = any(name in event for event in events for name in ("RRULE", "RDATE", "RECURRENCE-ID"))
        occurrences = recurring_ical_events.of(calendar).between(
            window_start - QUERY_MARGIN, window_end + QUERY_MARGIN
        )
        if len(occurrences) > MAX_OCCURRENCES:
            raise InvalidCalendarData(f"too many occurrences in the window: {len(occurrences)}")
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
    except InvalidCalendarData:
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


def _check_expansion_cost(
    events: list[icalendar.Event], window_start: datetime, window_end: datetime
) -> None:
    """Refuse a resource whose recurrence rules would take too long to expand, before expanding it.

    The expansion library walks every instance from DTSTART up to the window's end and builds a
    component for each one in the window. Walking the rules lazily here bounds that work.
    """
    # Naive wall-clock times throughout: the counts need not be exact to the hour.
    window_first = (window_start - QUERY_MARGIN).replace(tzinfo=None)
    window_last = (window_end + QUERY_MARGIN).replace(tzinfo=None)
    in_window = 0
    for event in events:
        for rule in _values(event, "RRULE"):
            rule_text = bytes(rule.to_ical()).decode()
            if "FREQ=SECONDLY" in rule_text.upper():
                # dateutil steps second by second even when BYxxx parts allow one instance a day.
                raise InvalidCalendarData("too many occurrences: FREQ=SECONDLY is not supported")
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
            for walked, instance in enumerate(instances, start=1):
                if instance >= window_last:
                    break
                if walked > MAX_RULE_INSTANCES:
                    raise InvalidCalendarData(f"too many occurrences: RRULE:{rule_text} from {dtstart}")
                in_window += instance >= window_first
    if in_window > MAX_OCCURRENCES:
        raise InvalidCalendarData(f"too many occurrences in the window: {in_window}")


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
