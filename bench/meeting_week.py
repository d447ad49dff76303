"""The meeting scenario's data: three people in three zones, their working hours and a busy fortnight.

Built from a seed and the window's first Monday only, so every strategy (and every run with the same
seed) starts from the same busy weeks on calendars of its own. `plant` writes one copy: the calendars
with their rules, upstream busy time as BusyBlock rows (a weekly series one row per occurrence, as sync
stores it) and some earlier meetings as committed bookings.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from bookings import engine
from bookings.models import BusyBlock, Calendar, UpstreamSource
from bookings.rules import open_spans, parse_rules
from bookings.spans import Span
from workspaces.actor import Actor

MEETING = timedelta(minutes=30)
WORKING_DAYS = 10  # the window: the next two working weeks, Monday to Friday twice
BUSY_SHARE = 0.3  # of each person's working time, already taken before any agent asks
# Holds outlive the run: a lapsed hold would free its slot for a second meeting and blur the counts.
HOLD_TTL_SECONDS = 3600
# The sync connection id the planted blocks claim (no connection row: the engine only reads blocks).
PLANTED_CONNECTION_ID = 0

_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri")


def _weekdays(*intervals: tuple[str, str]) -> dict[str, list[list[str]]]:
    hours = {day: [list(pair) for pair in intervals] for day in _WEEKDAYS}
    return {**hours, "sat": [], "sun": []}


@dataclass(frozen=True)
class Person:
    name: str
    zone: str
    working_hours: dict[str, list[list[str]]]
    # The weekly series of their own (local weekday, start, minutes), e.g. a team stand-up.
    series: tuple[int, str, int]
    # By the window's day number (0 = its first Monday): that day's hours instead of the weekly ones.
    overrides: dict[int, list[list[str]]] = field(default_factory=dict)


# With 09:00–17:00 everywhere, Kolkata and New York never overlap (10.5 hours apart): the Kolkata person
# works the late shift of a team supporting Europe and America, New York starts at 08:00. In winter the
# three share 13:00–17:00 UTC on working days.
PEOPLE = (
    Person(
        "Berlin",
        "Europe/Berlin",
        _weekdays(("09:00", "12:00"), ("13:00", "18:00")),  # an hour for lunch
        series=(0, "09:00", 60),
        overrides={9: [["09:00", "12:00"], ["13:00", "16:00"]]},  # the second Friday ends early
    ),
    Person("New York", "America/New_York", _weekdays(("08:00", "17:00")), series=(1, "16:00", 60)),
    Person("Kolkata", "Asia/Kolkata", _weekdays(("13:30", "22:30")), series=(2, "14:00", 60)),
)
# A weekly meeting of all three (local to New York), on each one's upstream calendar.
SHARED_SERIES = (3, "10:00", 60)
SHARED_SERIES_ZONE = "America/New_York"


@dataclass
class PersonWeek:
    person: Person
    open: list[Span]  # working time in the window, UTC
    blocks: list[tuple[str, Span]] = field(default_factory=list)  # (upstream event key, span)
    bookings: list[Span] = field(default_factory=list)  # earlier meetings booked through AgentCal

    @property
    def busy(self) -> list[Span]:
        return [span for _key, span in self.blocks] + self.bookings

    @property
    def busy_share(self) -> float:
        open_minutes = sum(s.minutes for s in self.open)
        return sum(s.minutes for s in self.busy) / open_minutes if open_minutes else 0.0


@dataclass
class MeetingWeeks:
    window: Span
    people: list[PersonWeek]


def first_monday_after(moment: datetime) -> datetime:
    """Midnight UTC of the first Monday at least a day after `moment`."""
    day = (moment + timedelta(days=1)).astimezone(UTC).date()
    day += timedelta(days=(7 - day.weekday()) % 7)
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def person_rules(person: Person, window: Span) -> dict[str, object]:
    """The calendar's settings: its zone, weekly hours and date overrides (dated from the window)."""
    first = window.start.date()
    overrides = {(first + timedelta(days=d)).isoformat(): hours for d, hours in person.overrides.items()}
    return {"timezone": person.zone, "working_hours": person.working_hours, "date_overrides": overrides}


def _local_series(window: Span, zone: str, series: tuple[int, str, int]) -> list[Span]:
    """A weekly series' occurrences inside the window, placed in the zone's wall time."""
    weekday, at, minutes = series
    rules = parse_rules(working_hours={_WEEKDAYS[weekday]: [[at, "24:00"]]})
    return [Span(s.start, s.start + timedelta(minutes=minutes)) for s in open_spans(rules, zone, window)]


def build(*, monday: datetime, seed: int) -> MeetingWeeks:
    """Each person's fortnight: their series, the shared series, one earlier meeting in the shared
    hours on about half of their days, and local-only meetings until a day is ~30 % busy."""
    window = Span(monday, monday + timedelta(days=WORKING_DAYS // 5 * 7 - 2))
    weeks = []
    for person in PEOPLE:
        settings = person_rules(person, window)
        rules = parse_rules(
            working_hours=settings["working_hours"], date_overrides=settings["date_overrides"]
        )
        weeks.append(PersonWeek(person, open_spans(rules, person.zone, window)))
    shared = intersect([w.open for w in weeks])
    for number, week in enumerate(weeks):
        rng = random.Random(seed * 1_000 + number)
        person = week.person
        for span in _local_series(window, person.zone, person.series):
            week.blocks.append((f"series-{number}", span))
        for span in _local_series(window, SHARED_SERIES_ZONE, SHARED_SERIES):
            week.blocks.append(("series-shared", span))
        for day in range(WORKING_DAYS // 5 * 7):
            day_span = Span(window.start + timedelta(days=day), window.start + timedelta(days=day + 1))
            units = _units([s for s in week.open if s.overlaps(day_span) and s.start >= day_span.start])
            if not units:
                continue
            target = round(BUSY_SHARE * len(units))
            taken = [u for u in units if any(u.overlaps(b) for b in week.busy)]
            free_shared = [u for u in units if u not in taken and any(_inside(u, s) for s in shared)]
            if free_shared and rng.random() < 0.5:
                booked = rng.choice(free_shared)
                week.bookings.append(booked)
                taken.append(booked)
            local = [u for u in units if u not in taken and not any(_inside(u, s) for s in shared)]
            rng.shuffle(local)
            for n, unit in enumerate(local[: max(target - len(taken), 0)]):
                week.blocks.append((f"event-{number}-{day}-{n}", unit))
    return MeetingWeeks(window, weeks)


def _units(spans: Sequence[Span]) -> list[Span]:
    """The meeting-sized pieces of working time, on the half-hour grid."""
    units = []
    for span in spans:
        start = span.start
        while start + MEETING <= span.end:
            units.append(Span(start, start + MEETING))
            start += MEETING
    return units


def _inside(inner: Span, outer: Span) -> bool:
    return outer.start <= inner.start and inner.end <= outer.end


def intersect(schedules: Sequence[Sequence[Span]]) -> list[Span]:
    common = list(schedules[0])
    for other in schedules[1:]:
        common = [
            Span(max(a.start, b.start), min(a.end, b.end))
            for a in common
            for b in other
            if max(a.start, b.start) < min(a.end, b.end)
        ]
    return sorted(common, key=lambda s: s.start)


def common_free_meetings(weeks: MeetingWeeks) -> int:
    """How many meetings the three people's shared free time holds, side by side on the grid."""
    busy = [span for week in weeks.people for span in week.busy]
    count = 0
    for span in intersect([w.open for w in weeks.people]):
        start = span.start
        while start + MEETING <= span.end:
            candidate = Span(start, start + MEETING)
            blocker = max((b.end for b in busy if b.overlaps(candidate)), default=None)
            if blocker is None:
                count += 1
                start += MEETING
            else:
                start = blocker
    return count


def plant(weeks: MeetingWeeks, *, actor: Actor, label: str) -> list[str]:
    """One fresh copy of the fortnight: three calendars (public ids, in PEOPLE's order)."""
    calendars: list[Calendar] = []
    for week in weeks.people:
        calendar = engine.calendar_create(
            actor=actor,
            name=f"bench meeting {week.person.name} ({label})",
            hold_ttl_seconds=HOLD_TTL_SECONDS,
            **person_rules(week.person, weeks.window),
        )
        calendars.append(calendar)
        BusyBlock.objects.bulk_create(
            BusyBlock(
                calendar=calendar,
                source=UpstreamSource.CALDAV,
                connection_id=PLANTED_CONNECTION_ID,
                event_key=key,
                start_time=span.start,
                end_time=span.end,
            )
            for key, span in week.blocks
        )
        for span in week.bookings:
            engine.booking_create(actor=actor, calendar=calendar, span=span, title="earlier meeting")
    return [c.public_id for c in calendars]
