"""Calendar rules (bookings.rules): parsing and validation, open and closed time across DST, buffers, notice.

Pure functions, no database. The DST tables cover 2026's changes: the US on 8 March and 1 November,
the EU on 29 March and 25 October; Asia/Kolkata has none and is the control.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentcal.errors import InvalidRequest
from bookings.rules import (
    MAX_DATE_OVERRIDES,
    MAX_INTERVALS_PER_DAY,
    MAX_REPORTED_PROBLEMS,
    WEEKDAYS,
    CalendarRules,
    InvalidRules,
    buffered,
    closed_spans,
    first_instant_at,
    notice_start,
    open_spans,
    parse_rules,
)
from bookings.spans import Span

BERLIN, NEW_YORK, KOLKATA = "Europe/Berlin", "America/New_York", "Asia/Kolkata"
HOUR = timedelta(hours=1)


def z(text: str) -> datetime:
    """A UTC instant from "2026-03-29T01:00"."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def span(start: str, end: str) -> Span:
    return Span(z(start), z(end))


def weekday(day: str) -> str:
    return WEEKDAYS[date.fromisoformat(day).weekday()]


def around(day: str, days: int = 2) -> Span:
    """A UTC window from `days` before the date to `days` after it: every zone's whole date inside."""
    midnight = z(f"{day}T00:00")
    return Span(midnight - timedelta(days=days), midnight + timedelta(days=days + 1))


# --- One interval on one local date, across the 2026 changes ------------------------------------------------
# (zone, local date, interval, the UTC spans it is open). The weekly schedule opens only that weekday and the
# window spans five days, so only that date contributes.
DST_CASES = [
    # Europe/Berlin: CET (+1) → CEST (+2) at 01:00Z on 29 March; back at 01:00Z on 25 October.
    (BERLIN, "2026-03-28", ("09:00", "17:00"), [("2026-03-28T08:00", "2026-03-28T16:00")]),
    (BERLIN, "2026-03-29", ("09:00", "17:00"), [("2026-03-29T07:00", "2026-03-29T15:00")]),
    (BERLIN, "2026-03-29", ("00:00", "24:00"), [("2026-03-28T23:00", "2026-03-29T22:00")]),  # 23 h
    (BERLIN, "2026-03-29", ("01:00", "04:00"), [("2026-03-29T00:00", "2026-03-29T02:00")]),  # 2 h
    # 02:30 never happens: a start there opens when the clocks jump (03:00 CEST), an end there closes then.
    (BERLIN, "2026-03-29", ("02:30", "04:00"), [("2026-03-29T01:00", "2026-03-29T02:00")]),
    (BERLIN, "2026-03-29", ("01:00", "02:30"), [("2026-03-29T00:00", "2026-03-29T01:00")]),
    (BERLIN, "2026-03-29", ("02:10", "02:50"), []),  # wholly inside the gap: never open
    (BERLIN, "2026-10-24", ("09:00", "17:00"), [("2026-10-24T07:00", "2026-10-24T15:00")]),
    (BERLIN, "2026-10-25", ("09:00", "17:00"), [("2026-10-25T08:00", "2026-10-25T16:00")]),
    (BERLIN, "2026-10-25", ("00:00", "24:00"), [("2026-10-24T22:00", "2026-10-25T23:00")]),  # 25 h
    # 02:00–03:00 happens twice: a time there is its first occurrence (CEST), so an interval starting in
    # it spans the repeat and one ending in it closes at the first pass.
    (BERLIN, "2026-10-25", ("02:30", "03:30"), [("2026-10-25T00:30", "2026-10-25T02:30")]),  # 2 h
    (BERLIN, "2026-10-25", ("01:00", "02:30"), [("2026-10-24T23:00", "2026-10-25T00:30")]),
    # Between the US and the EU changes the two zones are an hour closer than usual.
    (BERLIN, "2026-03-16", ("09:00", "17:00"), [("2026-03-16T08:00", "2026-03-16T16:00")]),
    (BERLIN, "2026-10-26", ("09:00", "17:00"), [("2026-10-26T08:00", "2026-10-26T16:00")]),
    # America/New_York: EST (-5) → EDT (-4) at 07:00Z on 8 March; back at 06:00Z on 1 November.
    (NEW_YORK, "2026-03-07", ("09:00", "17:00"), [("2026-03-07T14:00", "2026-03-07T22:00")]),
    (NEW_YORK, "2026-03-08", ("09:00", "17:00"), [("2026-03-08T13:00", "2026-03-08T21:00")]),
    (NEW_YORK, "2026-03-08", ("00:00", "24:00"), [("2026-03-08T05:00", "2026-03-09T04:00")]),  # 23 h
    (NEW_YORK, "2026-03-08", ("02:30", "04:00"), [("2026-03-08T07:00", "2026-03-08T08:00")]),
    (NEW_YORK, "2026-03-16", ("09:00", "17:00"), [("2026-03-16T13:00", "2026-03-16T21:00")]),
    (NEW_YORK, "2026-10-26", ("09:00", "17:00"), [("2026-10-26T13:00", "2026-10-26T21:00")]),
    (NEW_YORK, "2026-10-31", ("09:00", "17:00"), [("2026-10-31T13:00", "2026-10-31T21:00")]),
    (NEW_YORK, "2026-11-01", ("09:00", "17:00"), [("2026-11-01T14:00", "2026-11-01T22:00")]),
    (NEW_YORK, "2026-11-01", ("00:00", "24:00"), [("2026-11-01T04:00", "2026-11-02T05:00")]),  # 25 h
    (NEW_YORK, "2026-11-01", ("01:30", "03:00"), [("2026-11-01T05:30", "2026-11-01T08:00")]),  # 2.5 h
    (NEW_YORK, "2026-11-01", ("00:00", "01:30"), [("2026-11-01T04:00", "2026-11-01T05:30")]),
    # Asia/Kolkata (+05:30, no DST): the same eight hours whatever the date.
    (KOLKATA, "2026-03-08", ("09:00", "17:00"), [("2026-03-08T03:30", "2026-03-08T11:30")]),
    (KOLKATA, "2026-03-29", ("09:00", "17:00"), [("2026-03-29T03:30", "2026-03-29T11:30")]),
    (KOLKATA, "2026-03-29", ("00:00", "24:00"), [("2026-03-28T18:30", "2026-03-29T18:30")]),
    (KOLKATA, "2026-10-25", ("09:00", "17:00"), [("2026-10-25T03:30", "2026-10-25T11:30")]),
    (KOLKATA, "2026-11-01", ("09:00", "17:00"), [("2026-11-01T03:30", "2026-11-01T11:30")]),
    (KOLKATA, "2026-11-01", ("02:30", "04:00"), [("2026-10-31T21:00", "2026-10-31T22:30")]),
]


@pytest.mark.parametrize(("zone", "day", "interval", "expected"), DST_CASES)
def test_it_opens_each_interval_at_the_local_wall_times_across_dst(
    zone: str, day: str, interval: tuple[str, str], expected: list[tuple[str, str]]
) -> None:
    rules = parse_rules(working_hours={weekday(day): [list(interval)]})
    assert open_spans(rules, zone, around(day)) == [span(*pair) for pair in expected]


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK, KOLKATA])
@pytest.mark.parametrize("day", ["2026-03-08", "2026-03-29", "2026-10-25", "2026-11-01"])
def test_a_nine_to_five_day_is_eight_hours_on_every_change_day(zone: str, day: str) -> None:
    rules = parse_rules(working_hours={weekday(day): [["09:00", "17:00"]]})
    [opened] = open_spans(rules, zone, around(day))
    assert opened.duration == 8 * HOUR
    local = ZoneInfo(zone)
    assert (opened.start.astimezone(local).hour, opened.end.astimezone(local).hour) == (9, 17)


def test_a_time_that_never_happens_resolves_to_the_instant_the_clocks_jump() -> None:
    berlin, new_york = ZoneInfo(BERLIN), ZoneInfo(NEW_YORK)
    assert first_instant_at(date(2026, 3, 29), 150, berlin) == z("2026-03-29T01:00")  # 02:30 → 03:00 CEST
    assert first_instant_at(date(2026, 3, 8), 150, new_york) == z("2026-03-08T07:00")  # 02:30 → 03:00 EDT
    # A repeated time is its first occurrence (fold=0): summer time still.
    assert first_instant_at(date(2026, 10, 25), 150, berlin) == z("2026-10-25T00:30")  # 02:30 CEST
    assert first_instant_at(date(2026, 11, 1), 90, new_york) == z("2026-11-01T05:30")  # 01:30 EDT
    assert first_instant_at(date(2026, 3, 28), 24 * 60, berlin) == first_instant_at(
        date(2026, 3, 29), 0, berlin
    )


def test_it_finds_the_jump_in_a_zone_that_skips_half_an_hour() -> None:
    # Lord Howe Island goes from +10:30 to +11 at 02:00 local on the first Sunday of October.
    assert first_instant_at(date(2026, 10, 4), 2 * 60 + 15, ZoneInfo("Australia/Lord_Howe")) == z(
        "2026-10-03T15:30"
    )


def test_a_dates_hours_count_from_its_first_midnight_where_the_clocks_went_back_across_it() -> None:
    # Antarctica/Casey, 5 March 2010: at 02:00 (+11) the clocks went back to 23:00 (+8) on the 4th, so
    # Thursday's last hour came round again after Friday had begun. Friday's hours began at the first
    # midnight and run until their end's first occurrence, the repeat included.
    friday_morning = parse_rules(working_hours={"fri": [["00:00", "12:00"]]})
    window = span("2010-03-04T15:10", "2010-03-04T15:50")  # the clock shows Thursday 23:10 to 23:50
    assert open_spans(friday_morning, "Antarctica/Casey", window) == [window]
    assert open_spans(friday_morning, "Antarctica/Casey", around("2010-03-05")) == [
        span("2010-03-04T13:00", "2010-03-05T04:00")
    ]


# --- Overrides, short days, evenings past midnight, window edges --------------------------------------------
OFFICE_HOURS: dict[str, Any] = {name: [["09:00", "17:00"]] for name in WEEKDAYS[:5]}


@pytest.mark.parametrize(
    ("overrides", "window", "expected"),
    [
        # Christmas Eve (a Thursday) closed: Wednesday and Friday keep their hours.
        (
            {"2026-12-24": []},
            span("2026-12-23T00:00", "2026-12-26T00:00"),
            [("2026-12-23T08:00", "2026-12-23T16:00"), ("2026-12-25T08:00", "2026-12-25T16:00")],
        ),
        # New Year's Eve a short day.
        (
            {"2026-12-31": [["09:00", "13:00"]]},
            span("2026-12-31T00:00", "2027-01-01T00:00"),
            [("2026-12-31T08:00", "2026-12-31T12:00")],
        ),
        # A Sunday opened, with two stretches.
        (
            {"2026-12-27": [["10:00", "12:00"], ["13:00", "14:00"]]},
            span("2026-12-26T00:00", "2026-12-28T00:00"),
            [("2026-12-27T09:00", "2026-12-27T11:00"), ("2026-12-27T12:00", "2026-12-27T13:00")],
        ),
        # The whole of the EU's spring-forward Sunday: 23 hours.
        (
            {"2026-03-29": [["00:00", "24:00"]]},
            span("2026-03-28T00:00", "2026-03-30T00:00"),
            [("2026-03-28T23:00", "2026-03-29T22:00")],
        ),
    ],
)
def test_a_date_override_replaces_that_dates_hours(
    overrides: dict[str, Any], window: Span, expected: list[tuple[str, str]]
) -> None:
    rules = parse_rules(working_hours=OFFICE_HOURS, date_overrides=overrides)
    assert open_spans(rules, BERLIN, window) == [span(*pair) for pair in expected]


def test_an_override_closes_a_date_on_a_calendar_open_at_any_time() -> None:
    rules = parse_rules(date_overrides={"2026-12-24": []})
    window = span("2026-12-23T12:00", "2026-12-25T12:00")
    assert closed_spans(rules, BERLIN, window) == [span("2026-12-23T23:00", "2026-12-24T23:00")]
    assert open_spans(rules, BERLIN, window) == [
        span("2026-12-23T12:00", "2026-12-23T23:00"),
        span("2026-12-24T23:00", "2026-12-25T12:00"),
    ]


@pytest.mark.parametrize(
    ("hours", "window", "expected"),
    [
        # Friday 18:00–24:00 and Saturday 00:00–02:00 are one evening.
        (
            {"fri": [["18:00", "24:00"]], "sat": [["00:00", "02:00"], ["10:00", "12:00"]]},
            span("2026-01-09T00:00", "2026-01-11T00:00"),
            [("2026-01-09T17:00", "2026-01-10T01:00"), ("2026-01-10T09:00", "2026-01-10T11:00")],
        ),
        # The same across the night the clocks go forward: ten hours of wall time, nine of real time.
        (
            {"sat": [["18:00", "24:00"]], "sun": [["00:00", "04:00"]]},
            span("2026-03-28T00:00", "2026-03-30T00:00"),
            [("2026-03-28T17:00", "2026-03-29T02:00")],
        ),
        # A closed Saturday: Friday's evening ends at midnight.
        (
            {"fri": [["18:00", "24:00"]], "sat": [["02:00", "04:00"]]},
            span("2026-01-09T00:00", "2026-01-11T00:00"),
            [("2026-01-09T17:00", "2026-01-09T23:00"), ("2026-01-10T01:00", "2026-01-10T03:00")],
        ),
        # Intervals that touch are one open stretch.
        (
            {"mon": [["09:00", "12:00"], ["12:00", "17:00"]]},
            span("2026-01-12T00:00", "2026-01-13T00:00"),
            [("2026-01-12T08:00", "2026-01-12T16:00")],
        ),
    ],
)
def test_it_joins_hours_that_meet_at_midnight_or_touch(
    hours: dict[str, Any], window: Span, expected: list[tuple[str, str]]
) -> None:
    assert open_spans(parse_rules(working_hours=hours), BERLIN, window) == [span(*pair) for pair in expected]


MONDAY = parse_rules(working_hours={"mon": [["09:00", "17:00"]]})  # 08:00Z–16:00Z on 12 January 2026


@pytest.mark.parametrize(
    ("window", "opened", "closed"),
    [
        (
            span("2026-01-12T10:00", "2026-01-12T12:00"),
            [("2026-01-12T10:00", "2026-01-12T12:00")],
            [],
        ),
        (
            span("2026-01-12T07:00", "2026-01-12T09:00"),
            [("2026-01-12T08:00", "2026-01-12T09:00")],
            [("2026-01-12T07:00", "2026-01-12T08:00")],
        ),
        (
            span("2026-01-12T15:30", "2026-01-12T18:00"),
            [("2026-01-12T15:30", "2026-01-12T16:00")],
            [("2026-01-12T16:00", "2026-01-12T18:00")],
        ),
        (
            span("2026-01-12T08:00", "2026-01-12T16:00"),
            [("2026-01-12T08:00", "2026-01-12T16:00")],
            [],
        ),
        (
            span("2026-01-12T16:00", "2026-01-13T08:00"),
            [],
            [("2026-01-12T16:00", "2026-01-13T08:00")],
        ),
        (
            span("2026-01-11T00:00", "2026-01-20T00:00"),
            [("2026-01-12T08:00", "2026-01-12T16:00"), ("2026-01-19T08:00", "2026-01-19T16:00")],
            [
                ("2026-01-11T00:00", "2026-01-12T08:00"),
                ("2026-01-12T16:00", "2026-01-19T08:00"),
                ("2026-01-19T16:00", "2026-01-20T00:00"),
            ],
        ),
        (span("2026-01-12T10:00", "2026-01-12T10:00"), [], []),
    ],
)
def test_the_window_edges_cut_the_hours(
    window: Span, opened: list[tuple[str, str]], closed: list[tuple[str, str]]
) -> None:
    assert open_spans(MONDAY, BERLIN, window) == [span(*pair) for pair in opened]
    assert closed_spans(MONDAY, BERLIN, window) == [span(*pair) for pair in closed]


def test_it_answers_in_utc_whatever_zone_the_window_is_given_in() -> None:
    india = timezone(timedelta(hours=5, minutes=30))
    window = Span(datetime(2026, 1, 12, 15, 30, tzinfo=india), datetime(2026, 1, 12, 17, 30, tzinfo=india))
    opened = open_spans(MONDAY, BERLIN, window)
    assert opened == [span("2026-01-12T10:00", "2026-01-12T12:00")]
    assert all(s.start.tzinfo is UTC and s.end.tzinfo is UTC for s in opened)


def test_no_working_hours_is_open_at_any_time_and_an_empty_schedule_never() -> None:
    window = span("2026-03-28T00:00", "2026-03-30T00:00")
    assert open_spans(CalendarRules(), BERLIN, window) == [window]
    assert closed_spans(CalendarRules(), BERLIN, window) == []
    assert parse_rules(working_hours=None, date_overrides=None) == CalendarRules()
    never = parse_rules(working_hours={})
    assert open_spans(never, BERLIN, window) == []
    assert closed_spans(never, BERLIN, window) == [window]


# --- Parsing: what is kept, what is shown back --------------------------------------------------------------


def test_a_weekday_left_out_is_closed_and_shown_as_closed() -> None:
    rules = parse_rules(working_hours={"mon": [["09:00", "12:30"], ["13:30", "17:00"]]})
    assert rules.working_hours is not None
    assert rules.working_hours.to_json() == {
        "mon": [["09:00", "12:30"], ["13:30", "17:00"]],
        "tue": [],
        "wed": [],
        "thu": [],
        "fri": [],
        "sat": [],
        "sun": [],
    }
    assert rules.hours_on(date(2026, 1, 13)) == ()


def test_what_is_shown_back_parses_to_the_same_rules() -> None:
    rules = parse_rules(
        working_hours={**OFFICE_HOURS, "sat": [["00:00", "02:00"], ["22:00", "24:00"]]},
        date_overrides={"2026-12-27": [["10:00", "14:00"]], "2026-12-24": []},
    )
    assert rules.working_hours is not None
    assert rules.date_overrides_json() == {"2026-12-24": [], "2026-12-27": [["10:00", "14:00"]]}
    shown = parse_rules(
        working_hours=rules.working_hours.to_json(), date_overrides=rules.date_overrides_json()
    )
    assert shown == rules


def test_it_takes_as_many_overrides_as_a_year_has_days() -> None:
    first = date(2028, 1, 1)
    overrides: dict[str, list[Any]] = {
        (first + timedelta(days=n)).isoformat(): [] for n in range(MAX_DATE_OVERRIDES)
    }
    assert len(parse_rules(date_overrides=overrides).date_overrides) == MAX_DATE_OVERRIDES


# --- Validation: every bad input named by its path ----------------------------------------------------------
TOO_MANY_INTERVALS = [[f"{h:02d}:00", f"{h:02d}:30"] for h in range(MAX_INTERVALS_PER_DAY + 1)]
TOO_MANY_DATES: dict[str, list[Any]] = {
    (date(2026, 1, 1) + timedelta(days=n)).isoformat(): [] for n in range(MAX_DATE_OVERRIDES + 1)
}

INVALID = [
    # bad times
    ({"working_hours": {"mon": [["9:00", "17:00"]]}}, "working_hours.mon[0]", '"9:00": not a time'),
    ({"working_hours": {"mon": [["09:00", "24:30"]]}}, "working_hours.mon[0]", '"24:30": not a time'),
    ({"working_hours": {"mon": [["09:60", "17:00"]]}}, "working_hours.mon[0]", '"09:60": not a time'),
    ({"working_hours": {"mon": [["09:00:00", "17:00"]]}}, "working_hours.mon[0]", "not a time"),
    ({"working_hours": {"mon": [["noon", 1700]]}}, "working_hours.mon[0]", '"noon" and 1700: not a time'),
    ({"working_hours": {"mon": [[None, "17:00"]]}}, "working_hours.mon[0]", "null: not a time"),
    # start not before end
    (
        {"working_hours": {"mon": [["17:00", "09:00"]]}},
        "working_hours.mon[0]",
        'end this interval at "24:00"',
    ),
    ({"working_hours": {"tue": [["09:00", "09:00"]]}}, "working_hours.tue[0]", "must have a length"),
    ({"working_hours": {"tue": [["24:00", "24:00"]]}}, "working_hours.tue[0]", "must have a length"),
    # overlap and order, named by day and pair
    (
        {"working_hours": {"wed": [["09:00", "12:30"], ["12:00", "14:00"]]}},
        "working_hours.wed[1]",
        '["12:00", "14:00"] overlaps wed[0] ["09:00", "12:30"]',
    ),
    (
        {"working_hours": {"wed": [["13:00", "17:00"], ["09:00", "12:00"]]}},
        "working_hours.wed[1]",
        '["09:00", "12:00"] comes before wed[0] ["13:00", "17:00"]',
    ),
    (
        {"date_overrides": {"2026-12-27": [["10:00", "14:00"], ["13:00", "15:00"]]}},
        "date_overrides.2026-12-27[1]",
        "overlaps 2026-12-27[0]",
    ),
    # shapes
    ({"working_hours": {"monday": [["09:00", "17:00"]]}}, "working_hours.monday", "Not a weekday"),
    ({"working_hours": {"Mon": []}}, "working_hours.Mon", "Not a weekday"),
    ({"working_hours": [["09:00", "17:00"]]}, "working_hours", "Must be an object of weekdays"),
    ({"working_hours": "9-5"}, "working_hours", "Must be an object of weekdays"),
    ({"working_hours": {"mon": "09:00-17:00"}}, "working_hours.mon", "Must be a list"),
    ({"working_hours": {"mon": ["09:00", "17:00"]}}, "working_hours.mon", 'not ["09:00", "17:00"]'),
    ({"working_hours": {"mon": [["09:00"]]}}, "working_hours.mon[0]", "pair"),
    ({"working_hours": {"mon": [["09:00", "12:00", "17:00"]]}}, "working_hours.mon[0]", "pair"),
    (
        {"working_hours": {"mon": TOO_MANY_INTERVALS}},
        "working_hours.mon",
        "At most 6 intervals a day (7 given)",
    ),
    ({"date_overrides": [["2026-12-24", []]]}, "date_overrides", "Must be an object of dates"),
    ({"date_overrides": {"2026-12-24": "closed"}}, "date_overrides.2026-12-24", "Must be a list"),
    (
        {"date_overrides": {"2026-12-24": [["10:00", "09:00"]]}},
        "date_overrides.2026-12-24[0]",
        "after its end",
    ),
    ({"date_overrides": TOO_MANY_DATES}, "date_overrides", "At most 366 dates (367 given)"),
    # bad dates
    ({"date_overrides": {"2026-02-30": []}}, "date_overrides.2026-02-30", "Not a date"),
    ({"date_overrides": {"24.12.2026": []}}, "date_overrides.24.12.2026", "Not a date"),
    ({"date_overrides": {"20261224": []}}, "date_overrides.20261224", "Not a date"),
    ({"date_overrides": {"2026-W52-4": []}}, "date_overrides.2026-W52-4", "Not a date"),
    ({"date_overrides": {"2026-12-24T00:00": []}}, "date_overrides.2026-12-24T00:00", "Not a date"),
]


@pytest.mark.parametrize(("fields", "path", "message"), INVALID)
def test_it_refuses_each_bad_input_naming_its_path(fields: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(InvalidRules) as refused:
        parse_rules(**fields)
    assert list(refused.value.errors) == [path]
    assert message in " ".join(refused.value.errors[path])


def test_every_problem_in_both_fields_comes_back_at_once_as_a_400_with_errors() -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_rules(
            working_hours={"mon": [["09:00", "12:30"], ["12:00", "14:00"]], "tue": [["25:00", "26:00"]]},
            date_overrides={"2026-13-01": [], "2026-12-24": [["14:00", "10:00"]]},
        )
    problem = refused.value.problem()
    assert (problem["status"], problem["error"]) == (400, "invalid_request")
    assert sorted(problem["errors"]) == [
        "date_overrides.2026-12-24[0]",
        "date_overrides.2026-13-01",
        "working_hours.mon[1]",
        "working_hours.tue[0]",
    ]


def test_it_lists_a_bounded_number_of_problems_and_counts_the_rest() -> None:
    bad_dates: dict[str, list[Any]] = {
        f"2026-02-{day}": [] for day in range(30, 30 + MAX_REPORTED_PROBLEMS + 20)
    }
    with pytest.raises(InvalidRules) as refused:
        parse_rules(date_overrides=bad_dates)
    errors = refused.value.errors
    assert len(errors) == MAX_REPORTED_PROBLEMS + 1
    assert errors["date_overrides"] == ["20 more problems not listed."]


def test_it_quotes_a_clients_bad_value_clipped_and_on_one_line() -> None:
    with pytest.raises(InvalidRules) as refused:
        parse_rules(working_hours={"x\n" * 500: [], "mon": [["\x00" + "9" * 500, "17:00"]]})
    paths = list(refused.value.errors)
    assert all(len(path) < 60 and path.isprintable() for path in paths)
    assert all(len(m) < 200 and m.isprintable() for ms in refused.value.errors.values() for m in ms)


# --- Buffers and notice -------------------------------------------------------------------------------------


def test_buffers_widen_a_span_on_each_side() -> None:
    meeting = span("2026-01-12T10:00", "2026-01-12T11:00")
    assert buffered(meeting, timedelta(minutes=15), timedelta(minutes=5)) == span(
        "2026-01-12T09:45", "2026-01-12T11:05"
    )
    assert buffered(meeting, timedelta(0), timedelta(0)) == meeting
    with pytest.raises(ValueError, match="never negative"):
        buffered(meeting, timedelta(minutes=-1), timedelta(0))


def test_notice_is_the_earliest_start_from_now() -> None:
    now = z("2026-01-12T10:07")
    assert notice_start(now, 0) == now
    assert notice_start(now, 120) == z("2026-01-12T12:07")
    with pytest.raises(ValueError, match="never negative"):
        notice_start(now, -5)


# --- Property: open and closed time partition any window, in any zone ---------------------------------------
# Zones with unusual changes besides the three above: a half-hour step (Lord Howe), changes at midnight
# (Santiago, Havana), a whole skipped day (Apia, 30 December 2011), clocks back across midnight (Casey, 2010).
ZONES = [
    BERLIN,
    NEW_YORK,
    KOLKATA,
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Havana",
    "Pacific/Apia",
]
# Anchors near the changes, so windows often straddle one.
ANCHORS = [
    z("2026-03-08T07:00"),
    z("2026-03-29T01:00"),
    z("2026-10-25T01:00"),
    z("2026-11-01T06:00"),
    z("2026-10-03T15:30"),
    z("2026-04-05T03:00"),
    z("2026-09-06T04:00"),
    z("2011-12-30T10:00"),
    z("2010-03-04T15:00"),
]


@st.composite
def day_hours(draw: st.DrawFn) -> list[list[str]]:
    """A valid day: an even number of distinct minute marks, in order, paired up."""
    marks = sorted(draw(st.sets(st.integers(0, 24 * 60), max_size=2 * MAX_INTERVALS_PER_DAY)))
    marks = marks[: len(marks) // 2 * 2]
    clock = [f"{m // 60:02d}:{m % 60:02d}" for m in marks]
    return [clock[i : i + 2] for i in range(0, len(clock), 2)]


rules_strategy = st.builds(
    lambda hours, overrides: parse_rules(working_hours=hours, date_overrides=overrides),
    st.none() | st.dictionaries(st.sampled_from(WEEKDAYS), day_hours()),
    st.dictionaries(
        st.dates(date(2010, 2, 20), date(2027, 1, 10)).map(date.isoformat), day_hours(), max_size=8
    ),
)
windows = st.builds(
    lambda anchor, offset, length: Span(anchor + offset, anchor + offset + length),
    st.sampled_from(ANCHORS),
    st.timedeltas(-timedelta(days=4), timedelta(days=4)).map(
        lambda d: timedelta(minutes=d // timedelta(minutes=1))
    ),
    st.timedeltas(timedelta(0), timedelta(days=9)),
)


def open_by_the_clock(rules: CalendarRules, zone: ZoneInfo, instant: datetime) -> bool:
    """The plain reading, right wherever no clock change is near: is the local time inside an interval?"""
    local = instant.astimezone(zone)
    seconds = local.hour * 3600 + local.minute * 60 + local.second + local.microsecond / 1e6
    return any(start * 60 <= seconds < end * 60 for start, end in rules.hours_on(local.date()))


def no_change_near(zone: ZoneInfo, instant: datetime) -> bool:
    offsets = {(instant + timedelta(hours=h)).astimezone(zone).utcoffset() for h in range(-27, 28, 3)}
    return len(offsets) == 1


@settings(max_examples=300, deadline=None)
@given(rules=rules_strategy, zone=st.sampled_from(ZONES), window=windows)
def test_open_and_closed_spans_partition_the_window_exactly(
    rules: CalendarRules, zone: str, window: Span
) -> None:
    opened = open_spans(rules, zone, window)
    closed = closed_spans(rules, zone, window)
    for spans in (opened, closed):
        assert all(s.start < s.end and s.start.tzinfo is UTC and s.end.tzinfo is UTC for s in spans)
        assert all(a.end < b.start for a, b in zip(spans, spans[1:], strict=False))  # merged, in order
    pieces = sorted([(s, True) for s in opened] + [(s, False) for s in closed], key=lambda p: p[0].start)
    if window.start == window.end:
        assert pieces == []
        return
    assert pieces[0][0].start == window.start and pieces[-1][0].end == window.end
    for (a, a_open), (b, b_open) in zip(pieces, pieces[1:], strict=False):
        assert a.end == b.start and a_open != b_open  # no gap, no overlap, open and closed alternate
    assert sum((s.duration for s, _ in pieces), timedelta(0)) == window.duration
    local = ZoneInfo(zone)
    for piece, is_open in pieces:
        middle = piece.start + piece.duration / 2
        if no_change_near(local, middle):
            assert open_by_the_clock(rules, local, middle) == is_open
