"""Reading upstream .ics resources into busy intervals, and writing AgentCal's bookings upstream.

Expected instants are worked out by hand. Europe/Berlin is UTC+1 until 2026-03-29 02:00 local and
UTC+2 until 2026-10-25 03:00 local; America/New_York is UTC-4 until 2026-11-01 02:00 local, then UTC-5.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import pytest

from sync.ical import (
    BusyInterval,
    EventVersion,
    ExpansionBudget,
    ExpansionCutShort,
    InvalidCalendarData,
    agentcal_booking_id,
    booking_ics,
    busy_intervals,
    event_version,
)


def ics(*lines: str) -> str:
    return "\r\n".join(
        ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Test//Test//EN", *lines, "END:VCALENDAR", ""]
    )


def vevent(*lines: str, uid: str = "event@example.com") -> list[str]:
    return ["BEGIN:VEVENT", f"UID:{uid}", "DTSTAMP:20260101T000000Z", *lines, "END:VEVENT"]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def busy(
    data: str,
    *,
    calendar_tz: str = "Europe/Berlin",
    window: tuple[datetime, datetime] = (utc(2026, 3, 1), utc(2026, 5, 1)),
    attendee_addresses: frozenset[str] = frozenset(),
) -> list[BusyInterval]:
    return busy_intervals(
        data,
        window_start=window[0],
        window_end=window[1],
        calendar_tz=calendar_tz,
        attendee_addresses=attendee_addresses,
    )


# Mondays 10:00-11:00 in Berlin: 16 and 23 March are before the change to summer time, 30 March
# and 6 April after it.
WEEKLY_MASTER = vevent(
    "DTSTART;TZID=Europe/Berlin:20260316T100000",
    "DTEND;TZID=Europe/Berlin:20260316T110000",
    "RRULE:FREQ=WEEKLY;COUNT=4",
    "SUMMARY:Weekly sync",
)


def test_it_expands_a_weekly_series_across_the_dst_change() -> None:
    assert busy(ics(*WEEKLY_MASTER)) == [
        BusyInterval(utc(2026, 3, 16, 9), utc(2026, 3, 16, 10), "2026-03-16T09:00:00+00:00"),
        BusyInterval(utc(2026, 3, 23, 9), utc(2026, 3, 23, 10), "2026-03-23T09:00:00+00:00"),
        BusyInterval(utc(2026, 3, 30, 8), utc(2026, 3, 30, 9), "2026-03-30T08:00:00+00:00"),
        BusyInterval(utc(2026, 4, 6, 8), utc(2026, 4, 6, 9), "2026-04-06T08:00:00+00:00"),
    ]


def test_it_drops_an_exdate_and_moves_an_overridden_occurrence() -> None:
    master = [*WEEKLY_MASTER[:-1], "EXDATE;TZID=Europe/Berlin:20260323T100000", "END:VEVENT"]
    moved = vevent(
        "RECURRENCE-ID;TZID=Europe/Berlin:20260330T100000",
        "DTSTART;TZID=Europe/Berlin:20260331T140000",
        "DTEND;TZID=Europe/Berlin:20260331T150000",
        "SUMMARY:Weekly sync (moved)",
    )
    assert busy(ics(*master, *moved)) == [
        BusyInterval(utc(2026, 3, 16, 9), utc(2026, 3, 16, 10), "2026-03-16T09:00:00+00:00"),
        BusyInterval(utc(2026, 3, 31, 12), utc(2026, 3, 31, 13), "2026-03-30T08:00:00+00:00"),
        BusyInterval(utc(2026, 4, 6, 8), utc(2026, 4, 6, 9), "2026-04-06T08:00:00+00:00"),
    ]


def test_it_adds_an_rdate_occurrence_with_the_series_duration() -> None:
    master = [*WEEKLY_MASTER[:-1], "RDATE;TZID=Europe/Berlin:20260325T160000", "END:VEVENT"]
    extra = BusyInterval(utc(2026, 3, 25, 15), utc(2026, 3, 25, 16), "2026-03-25T15:00:00+00:00")
    intervals = busy(ics(*master))
    assert len(intervals) == 5
    assert intervals[2] == extra


def test_a_cancelled_override_removes_only_its_occurrence() -> None:
    cancelled = vevent(
        "RECURRENCE-ID;TZID=Europe/Berlin:20260406T100000",
        "DTSTART;TZID=Europe/Berlin:20260406T100000",
        "DTEND;TZID=Europe/Berlin:20260406T110000",
        "STATUS:CANCELLED",
    )
    starts = [interval.start for interval in busy(ics(*WEEKLY_MASTER, *cancelled))]
    assert starts == [utc(2026, 3, 16, 9), utc(2026, 3, 23, 9), utc(2026, 3, 30, 8)]


def test_an_override_declined_by_the_owner_removes_only_its_occurrence() -> None:
    declined = vevent(
        "RECURRENCE-ID;TZID=Europe/Berlin:20260316T100000",
        "DTSTART;TZID=Europe/Berlin:20260316T100000",
        "DTEND;TZID=Europe/Berlin:20260316T110000",
        "ATTENDEE;PARTSTAT=DECLINED:mailto:ada@example.com",
    )
    intervals = busy(ics(*WEEKLY_MASTER, *declined), attendee_addresses=frozenset({"ada@example.com"}))
    assert [interval.start for interval in intervals] == [
        utc(2026, 3, 23, 9),
        utc(2026, 3, 30, 8),
        utc(2026, 4, 6, 8),
    ]


LUNCH = ("DTSTART:20260410T110000Z", "DTEND:20260410T120000Z")


def test_a_plain_event_blocks_with_an_empty_occurrence_key() -> None:
    assert busy(ics(*vevent(*LUNCH))) == [BusyInterval(utc(2026, 4, 10, 11), utc(2026, 4, 10, 12), "")]


def test_a_transparent_event_does_not_block() -> None:
    assert busy(ics(*vevent(*LUNCH, "TRANSP:TRANSPARENT"))) == []


def test_a_cancelled_event_does_not_block() -> None:
    assert busy(ics(*vevent(*LUNCH, "STATUS:CANCELLED"))) == []


def test_an_event_the_owner_declined_does_not_block() -> None:
    data = ics(
        *vevent(
            *LUNCH,
            "ATTENDEE;PARTSTAT=ACCEPTED:mailto:grace@example.com",
            "ATTENDEE;PARTSTAT=DECLINED:MAILTO:Ada@Example.COM",
        )
    )
    assert busy(data, attendee_addresses=frozenset({"ada@example.com"})) == []
    assert busy(data, attendee_addresses=frozenset({"mailto:ADA@example.com"})) == []


def test_an_event_someone_else_declined_blocks() -> None:
    data = ics(
        *vevent(
            *LUNCH,
            "ATTENDEE;PARTSTAT=ACCEPTED:mailto:ada@example.com",
            "ATTENDEE;PARTSTAT=DECLINED:mailto:grace@example.com",
        )
    )
    assert busy(data, attendee_addresses=frozenset({"ada@example.com"})) == [
        BusyInterval(utc(2026, 4, 10, 11), utc(2026, 4, 10, 12), "")
    ]


def test_an_all_day_event_blocks_the_23_hour_day_of_the_spring_change() -> None:
    [interval] = busy(ics(*vevent("DTSTART;VALUE=DATE:20260329")))
    assert interval == BusyInterval(utc(2026, 3, 28, 23), utc(2026, 3, 29, 22), "")
    assert interval.end - interval.start == timedelta(hours=23)


def test_an_all_day_event_is_read_in_the_calendars_zone() -> None:
    data = ics(*vevent("DTSTART;VALUE=DATE:20260329", "DTEND;VALUE=DATE:20260330"))
    assert busy(data, calendar_tz="America/New_York") == [
        BusyInterval(utc(2026, 3, 29, 4), utc(2026, 3, 30, 4), "")
    ]


def test_a_multi_day_all_day_event_spans_the_autumn_change() -> None:
    data = ics(*vevent("DTSTART;VALUE=DATE:20261024", "DTEND;VALUE=DATE:20261027"))
    window = (utc(2026, 10, 1), utc(2026, 11, 1))
    # 24 October 00:00 CEST to 27 October 00:00 CET: 3 days and the hour given back.
    assert busy(data, window=window) == [BusyInterval(utc(2026, 10, 23, 22), utc(2026, 10, 26, 23), "")]


def test_an_all_day_series_keys_its_occurrences_by_date() -> None:
    data = ics(*vevent("DTSTART;VALUE=DATE:20260328", "RRULE:FREQ=DAILY;COUNT=2"))
    assert busy(data) == [
        BusyInterval(utc(2026, 3, 27, 23), utc(2026, 3, 28, 23), "2026-03-28"),
        BusyInterval(utc(2026, 3, 28, 23), utc(2026, 3, 29, 22), "2026-03-29"),
    ]


def test_a_floating_time_is_read_in_the_calendars_zone() -> None:
    data = ics(*vevent("DTSTART:20260415T090000", "DTEND:20260415T100000"))
    assert busy(data, calendar_tz="America/New_York") == [
        BusyInterval(utc(2026, 4, 15, 13), utc(2026, 4, 15, 14), "")
    ]


def test_a_floating_series_follows_the_calendars_dst_change() -> None:
    data = ics(*vevent("DTSTART:20261030T090000", "DURATION:PT30M", "RRULE:FREQ=WEEKLY;COUNT=2"))
    window = (utc(2026, 10, 1), utc(2026, 12, 1))
    assert busy(data, calendar_tz="America/New_York", window=window) == [
        BusyInterval(utc(2026, 10, 30, 13), utc(2026, 10, 30, 13, 30), "2026-10-30T13:00:00+00:00"),
        BusyInterval(utc(2026, 11, 6, 14), utc(2026, 11, 6, 14, 30), "2026-11-06T14:00:00+00:00"),
    ]


def test_a_time_zone_defined_in_the_file_is_used() -> None:
    custom_zone = [
        "BEGIN:VTIMEZONE",
        "TZID:Office time",
        "BEGIN:STANDARD",
        "DTSTART:19701025T030000",
        "RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU",
        "TZOFFSETFROM:+0200",
        "TZOFFSETTO:+0100",
        "END:STANDARD",
        "BEGIN:DAYLIGHT",
        "DTSTART:19700329T020000",
        "RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU",
        "TZOFFSETFROM:+0100",
        "TZOFFSETTO:+0200",
        "END:DAYLIGHT",
        "END:VTIMEZONE",
    ]
    data = ics(
        *custom_zone,
        *vevent("DTSTART;TZID=Office time:20260323T100000", "DURATION:PT1H", "RRULE:FREQ=WEEKLY;COUNT=2"),
    )
    assert [(interval.start, interval.end) for interval in busy(data, calendar_tz="UTC")] == [
        (utc(2026, 3, 23, 9), utc(2026, 3, 23, 10)),
        (utc(2026, 3, 30, 8), utc(2026, 3, 30, 9)),
    ]


def test_an_event_without_an_end_does_not_block() -> None:
    assert busy(ics(*vevent("DTSTART:20260410T110000Z"))) == []


@pytest.mark.parametrize(
    "end",
    ["DTEND:20260410T100000Z", "DURATION:-PT1H", "DTEND:20260410T110000Z"],
    ids=["dtend-before-dtstart", "negative-duration", "zero-length"],
)
def test_an_event_ending_before_it_starts_does_not_block(end: str) -> None:
    assert busy(ics(*vevent("DTSTART:20260410T110000Z", end))) == []


def test_only_events_block() -> None:
    todo = ["BEGIN:VTODO", "UID:todo@example.com", "DTSTAMP:20260101T000000Z"]
    todo += ["DTSTART:20260410T080000Z", "DUE:20260410T170000Z", "END:VTODO"]
    alarm = ["BEGIN:VALARM", "ACTION:DISPLAY", "DESCRIPTION:Lunch", "TRIGGER:-PT15M", "END:VALARM"]
    data = ics(*todo, *vevent(*LUNCH, *alarm))
    assert busy(data) == [BusyInterval(utc(2026, 4, 10, 11), utc(2026, 4, 10, 12), "")]


def test_an_occurrence_overlapping_the_window_edge_is_returned_whole() -> None:
    data = ics(*vevent("DTSTART:20260410T080000Z", "DTEND:20260410T100000Z", "RRULE:FREQ=DAILY;COUNT=2"))
    window = (utc(2026, 4, 10, 9), utc(2026, 4, 11, 8))
    # The second day starts exactly at the window's end: half-open, so it is outside.
    assert busy(data, window=window) == [
        BusyInterval(utc(2026, 4, 10, 8), utc(2026, 4, 10, 10), "2026-04-10T08:00:00+00:00")
    ]


def test_it_reads_the_version_from_sequence_and_last_modified() -> None:
    master = vevent(*LUNCH, "RRULE:FREQ=DAILY", "SEQUENCE:2", "LAST-MODIFIED:20260110T120000Z")
    override = vevent(
        "RECURRENCE-ID:20260411T110000Z",
        "DTSTART:20260411T130000Z",
        "DTEND:20260411T140000Z",
        "SEQUENCE:3",
        "LAST-MODIFIED:20260201T080000Z",
    )
    assert event_version(ics(*master, *override)) == EventVersion(
        uid="event@example.com", sequence=3, modified=utc(2026, 2, 1, 8)
    )


def test_the_version_falls_back_to_dtstamp_and_sequence_zero() -> None:
    data = ics("BEGIN:VEVENT", "UID:plain@example.com", "DTSTAMP:20260305T101500Z", *LUNCH, "END:VEVENT")
    assert event_version(data.encode()) == EventVersion(
        uid="plain@example.com", sequence=0, modified=utc(2026, 3, 5, 10, 15)
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("this is not iCalendar", "cannot"),
        (ics("BEGIN:VEVENT", *LUNCH, "END:VEVENT"), "no UID"),
        (ics(*vevent(*LUNCH, uid="a@example.com"), *vevent(*LUNCH, uid="b@example.com")), "several UIDs"),
        (ics("BEGIN:VTODO", "UID:todo@example.com", "END:VTODO"), "no VEVENT"),
        ("\r\n".join(vevent(*LUNCH)), "VCALENDAR"),
    ],
)
def test_it_rejects_data_that_is_not_one_event(data: str, message: str) -> None:
    with pytest.raises(InvalidCalendarData, match=message):
        event_version(data)
    with pytest.raises(InvalidCalendarData, match=message):
        busy(data)


@pytest.mark.parametrize(
    "lines",
    [
        (*LUNCH, "RRULE:FREQ=SOMETIMES"),
        (*LUNCH, "RRULE:BYDAY=MO"),
        ("DTSTART;TZID=Mars/Olympus_Mons:20260410T110000", "DURATION:PT1H"),
        ("DTEND:20260410T120000Z",),
        ("DTSTART:2026-04-10", "DURATION:PT1H"),
    ],
    ids=["bad-frequency", "no-frequency", "unknown-tzid", "no-dtstart", "bad-date"],
)
def test_it_rejects_an_unreadable_event(lines: tuple[str, ...]) -> None:
    with pytest.raises(InvalidCalendarData):
        busy(ics(*vevent(*lines)))


def cut_short(data: str, *, window: tuple[datetime, datetime], budget: ExpansionBudget | None = None) -> Any:
    # CPU time of this thread: what the work costs, however loaded the machine is.
    started = time.thread_time()
    with pytest.raises(ExpansionCutShort, match="costs too much; blocking its whole span instead") as cut:
        busy_intervals(data, window_start=window[0], window_end=window[1], calendar_tz="UTC", budget=budget)
    assert time.thread_time() - started < 0.5, "refused before the expensive expansion"
    return [(interval.start, interval.end) for interval in cut.value.intervals]


def test_a_minutely_series_over_a_year_blocks_its_whole_span_at_once() -> None:
    data = ics(*vevent("DTSTART:20261201T000000Z", "DURATION:PT30S", "RRULE:FREQ=MINUTELY"))
    assert cut_short(data, window=(utc(2026, 12, 1), utc(2027, 12, 1))) == [
        (utc(2026, 12, 1), utc(2027, 12, 1))
    ]


def test_a_minutely_series_started_long_before_a_short_window_blocks_the_window() -> None:
    # A day holds only 720 of its instances, but the expansion would walk every other minute since 2020.
    data = ics(*vevent("DTSTART:20200101T000000Z", "DURATION:PT30S", "RRULE:FREQ=MINUTELY;INTERVAL=2"))
    assert cut_short(data, window=(utc(2026, 12, 1), utc(2026, 12, 2))) == [
        (utc(2026, 12, 1), utc(2026, 12, 2))
    ]


def test_a_series_cut_short_blocks_up_to_its_until_and_its_moved_occurrences_as_they_are() -> None:
    data = ics(
        *vevent(
            "DTSTART:20261201T090000Z",
            "DTEND:20261201T091000Z",
            "RRULE:FREQ=MINUTELY;INTERVAL=20;UNTIL=20270301T090000Z",
        ),
        *vevent("RECURRENCE-ID:20261201T092000Z", "DTSTART:20270601T120000Z", "DTEND:20270601T130000Z"),
    )
    assert cut_short(data, window=(utc(2026, 11, 1), utc(2027, 11, 1))) == [
        (utc(2026, 12, 1, 9), utc(2027, 3, 1, 9, 10)),  # its first start to its last possible end
        (utc(2027, 6, 1, 12), utc(2027, 6, 1, 13)),
    ]


@pytest.mark.parametrize("frequency", ["DAILY", "WEEKLY", "HOURLY", "MINUTELY"])
def test_a_rule_that_keeps_no_day_gives_its_first_occurrence_at_once(frequency: str) -> None:
    # There is no 30 February: walking day by day to find one would go on to the year 9999.
    data = ics(
        *vevent(
            "DTSTART:20261201T090000Z", "DURATION:PT1H", f"RRULE:FREQ={frequency};BYMONTH=2;BYMONTHDAY=30"
        )
    )
    started = time.thread_time()
    intervals = busy(data, calendar_tz="UTC", window=(utc(2026, 11, 1), utc(2027, 11, 1)))
    assert time.thread_time() - started < 0.5
    assert [(interval.start, interval.end) for interval in intervals] == [
        (utc(2026, 12, 1, 9), utc(2026, 12, 1, 10))
    ]


def test_a_rule_whose_next_day_is_decades_off_is_cut_short() -> None:
    # 29 February on a Monday: 2044 is the first. The walk to it, past the window, is 6,300 days: over
    # this budget.
    data = ics(
        *vevent(
            "DTSTART:20261201T090000Z", "DURATION:PT1H", "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"
        )
    )
    window = (utc(2026, 11, 1), utc(2027, 11, 1))
    budget = ExpansionBudget(per_event=5_000)
    assert cut_short(data, window=window, budget=budget) == [(utc(2026, 12, 1, 9), window[1])]
    # Within the default budget it is walked: its only occurrence in the window is DTSTART's.
    walked = busy(data, calendar_tz="UTC", window=window)
    assert [(interval.start, interval.end) for interval in walked] == [
        (utc(2026, 12, 1, 9), utc(2026, 12, 1, 10))
    ]


def test_a_free_series_cut_short_blocks_nothing() -> None:
    data = ics(
        *vevent("DTSTART:20261201T000000Z", "DURATION:PT10M", "TRANSP:TRANSPARENT", "RRULE:FREQ=MINUTELY")
    )
    assert cut_short(data, window=(utc(2026, 12, 1), utc(2027, 6, 1))) == []


def test_the_budget_of_a_sync_bounds_twenty_minutely_series_and_cuts_the_rest_short() -> None:
    window = (utc(2026, 12, 1), utc(2027, 6, 1))
    budget = ExpansionBudget(per_event=250_000, left=1_000_000)
    started = time.thread_time()
    for n in range(20):
        minutely = ics(
            *vevent(f"DTSTART:20261201T{n:02d}0000Z", "DURATION:PT10M", "RRULE:FREQ=MINUTELY;INTERVAL=30")
        )
        assert cut_short(minutely, window=window, budget=budget) == [(utc(2026, 12, 1, n), window[1])]
    assert time.thread_time() - started < 2.0
    # Each cut short spent only what its walk cost; what is left still expands a weekly series exactly.
    weekly = ics(*vevent("DTSTART:20261207T090000Z", "DURATION:PT1H", "RRULE:FREQ=WEEKLY;COUNT=2"))
    assert (
        len(
            busy_intervals(
                weekly, window_start=window[0], window_end=window[1], calendar_tz="UTC", budget=budget
            )
        )
        == 2
    )
    # Once the sync's budget is spent, a series is cut short without being walked.
    budget.left = 0
    assert cut_short(weekly, window=window, budget=budget) == [(utc(2026, 12, 7, 9), window[1])]


def test_a_short_minutely_series_is_expanded() -> None:
    data = ics(
        *vevent("DTSTART:20261201T090000Z", "DURATION:PT10M", "RRULE:FREQ=MINUTELY;INTERVAL=30;COUNT=3")
    )
    starts = [interval.start for interval in busy(data, window=(utc(2026, 12, 1), utc(2026, 12, 2)))]
    assert starts == [utc(2026, 12, 1, 9), utc(2026, 12, 1, 9, 30), utc(2026, 12, 1, 10)]


BOOKING_UID = "agentcal-bk_123@agentcal.example"
BOOKING_SUMMARY = "Intro call, booked by sdr"
BOOKING_DESCRIPTION = "Agenda:\nintroductions; pricing, next steps"
BOOKING_STAMP = utc(2026, 12, 1, 10, 20, 30)


def write_booking() -> str:
    return booking_ics(
        uid=BOOKING_UID,
        # 16:00 in Berlin on 7 December is 15:00 UTC.
        start=datetime(2026, 12, 7, 16, tzinfo=ZoneInfo("Europe/Berlin")),
        end=utc(2026, 12, 7, 15, 30),
        summary=BOOKING_SUMMARY,
        description=BOOKING_DESCRIPTION,
        sequence=4,
        stamp=BOOKING_STAMP,
        booking_id="bk_123",
    )


def test_a_booking_round_trips() -> None:
    text = write_booking()
    window = (utc(2026, 12, 1), utc(2027, 1, 1))
    assert busy(text, window=window) == [BusyInterval(utc(2026, 12, 7, 15), utc(2026, 12, 7, 15, 30), "")]
    assert event_version(text) == EventVersion(uid=BOOKING_UID, sequence=4, modified=BOOKING_STAMP)
    assert agentcal_booking_id(text) == "bk_123"


def test_a_booking_is_written_in_utc_with_crlf_line_endings() -> None:
    text = write_booking()
    lines = text.split("\r\n")
    assert "\n" not in text.replace("\r\n", "")
    assert lines[:3] == ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//AgentCal//AgentCal//EN"]
    for expected in (
        "DTSTART:20261207T150000Z",
        "DTEND:20261207T153000Z",
        "DTSTAMP:20261201T102030Z",
        "LAST-MODIFIED:20261201T102030Z",
        "STATUS:CONFIRMED",
        "TRANSP:OPAQUE",
        "X-AGENTCAL-BOOKING:bk_123",
    ):
        assert expected in lines
    [event] = icalendar.Calendar.from_ical(text).events
    assert str(event["SUMMARY"]) == BOOKING_SUMMARY
    assert str(event["DESCRIPTION"]) == BOOKING_DESCRIPTION


def test_someone_elses_event_has_no_booking_id() -> None:
    assert agentcal_booking_id(ics(*vevent(*LUNCH))) is None
