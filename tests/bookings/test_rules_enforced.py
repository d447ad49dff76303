"""The calendar rules bind every hold and commit in the write path (one calendar's one-statement write
and the general, locked path alike): working hours across zones and DST, date overrides, notice by the
database's clock, buffers around reservations and upstream busy time, and the audited override."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agentcal.clock import server_now
from bookings.models import BusyBlock, Calendar
from tests.bookings.helpers import NINE_TO_FIVE, commit, created, hold, problem, utc
from tests.helpers import Persona, audit_rows, create_calendar, iso


def span(start: datetime, minutes: int = 30) -> dict[str, str]:
    return {"start_time": iso(start), "end_time": iso(start + timedelta(minutes=minutes))}


@pytest.fixture
def room(sdr: Persona) -> str:
    """A calendar without rules, for the general (several calendars) path."""
    return create_calendar(sdr, name="Room")["id"]


# --- Working hours, across zones and DST -------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "before_change", "after_change"),
    [
        # Berlin springs forward on Sunday 28 March 2027: 09:00 is 08:00Z on the Friday, 07:00Z on Monday.
        ("Europe/Berlin", utc(2027, 3, 26, 8), utc(2027, 3, 29, 7)),
        # New York springs forward on 14 March 2027: 09:00 is 14:00Z on Friday 12th, 13:00Z on Monday 15th.
        ("America/New_York", utc(2027, 3, 12, 14), utc(2027, 3, 15, 13)),
        # Berlin falls back on 31 October 2027: 09:00 is 07:00Z on Friday 29th, 08:00Z on Monday 1 Nov.
        ("Europe/Berlin", utc(2027, 10, 29, 7), utc(2027, 11, 1, 8)),
        # New York falls back on 7 November 2027: 09:00 is 13:00Z on Friday 5th, 14:00Z on Monday 8th.
        ("America/New_York", utc(2027, 11, 5, 13), utc(2027, 11, 8, 14)),
    ],
)
def test_nine_o_clock_local_is_open_on_both_sides_of_a_dst_change_and_an_hour_off_is_not(
    sdr, room, zone, before_change, after_change
):
    calendar = create_calendar(sdr, name=zone, timezone=zone, working_hours=NINE_TO_FIVE)["id"]
    for opening in (before_change, after_change):
        # The hour before opening is refused on the one-statement path and with a second calendar.
        body = problem(hold(sdr, calendar, span(opening - timedelta(hours=1))), 422, "outside_working_hours")
        assert body["calendar"] == calendar and body["timezone"] == zone
        assert body["local_start_time"].startswith(f"{opening.astimezone(ZoneInfo(zone)):%Y-%m-%d}T08:00")
        problem(
            hold(sdr, calendar, span(opening - timedelta(hours=1)), also_calendars=[room]),
            422,
            "outside_working_hours",
        )
        created(hold(sdr, calendar, span(opening)))
        created(commit(sdr, calendar, span(opening + timedelta(hours=1)), also_calendars=[room]))
    # The last half hour of the day fits; one that runs past 17:00 does not.
    closing = after_change + timedelta(hours=8)
    created(hold(sdr, calendar, span(closing - timedelta(minutes=30))))
    problem(hold(sdr, calendar, span(closing - timedelta(minutes=15))), 422, "outside_working_hours")


def test_a_rejection_says_the_local_times_and_the_days_hours_and_is_audited(sdr):
    calendar = create_calendar(sdr, name="Kolkata", timezone="Asia/Kolkata", working_hours=NINE_TO_FIVE)["id"]
    # Saturday 9 January 2027, 10:00 in Kolkata (04:30Z): the weekend is closed.
    body = problem(commit(sdr, calendar, span(utc(2027, 1, 9, 4, 30))), 422, "outside_working_hours")

    assert body["local_start_time"] == "2027-01-09T10:00:00+05:30"
    assert body["hours_that_day"] == {"2027-01-09": []}
    rows = audit_rows(event_type="calendar.commit.rejected", failure_reason="outside_working_hours")
    assert len(rows) == 1 and rows[0].calendar_public_id == calendar


def test_a_closed_holiday_and_a_short_day_override_the_weekly_hours(sdr):
    calendar = create_calendar(
        sdr,
        name="Berlin",
        timezone="Europe/Berlin",
        working_hours=NINE_TO_FIVE,
        date_overrides={"2027-12-24": [], "2027-12-31": [["10:00", "13:00"]]},
    )["id"]

    problem(hold(sdr, calendar, span(utc(2027, 12, 24, 9))), 422, "outside_working_hours")  # 10:00, holiday
    created(hold(sdr, calendar, span(utc(2027, 12, 23, 9))))  # the Thursday before: a weekday as usual
    created(hold(sdr, calendar, span(utc(2027, 12, 31, 9))))  # 10:00 on the short day
    problem(hold(sdr, calendar, span(utc(2027, 12, 31, 8))), 422, "outside_working_hours")  # 09:00
    problem(hold(sdr, calendar, span(utc(2027, 12, 31, 11, 45))), 422, "outside_working_hours")  # to 13:15


# --- Notice, by the database's clock --------------------------------------------------------------------


@pytest.mark.parametrize("second_calendar", [False, True])
def test_nothing_starts_sooner_than_the_notice(sdr, room, second_calendar):
    calendar = create_calendar(sdr, name="AE", min_notice_minutes=120)["id"]
    also = {"also_calendars": [room]} if second_calendar else {}
    now = server_now()

    body = problem(hold(sdr, calendar, span(now + timedelta(minutes=90)), **also), 422, "insufficient_notice")
    earliest = datetime.fromisoformat(body["earliest_start_time"])
    assert body["min_notice_minutes"] == 120
    assert timedelta(0) <= earliest - (now + timedelta(minutes=120)) < timedelta(seconds=30)
    created(hold(sdr, calendar, span(now + timedelta(minutes=125)), **also))


# --- Buffers ----------------------------------------------------------------------------------------------


def test_a_buffer_keeps_free_time_on_both_sides_of_a_booking_whichever_came_first(sdr, exec_assistant, room):
    calendar = create_calendar(sdr, name="AE", buffer_after_minutes=15)["id"]
    ten = (server_now() + timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
    created(commit(sdr, calendar, span(ten, 60)))  # 10:00-11:00

    right_after = problem(hold(sdr, calendar, span(ten + timedelta(minutes=60))), 409, "slot_conflict")
    assert right_after["conflicting"]["reason"] == "buffer"
    assert right_after["conflicting"]["buffer_minutes"] == 15
    assert right_after["conflicting"]["start_time"] == iso(ten)
    # The new one's own after-buffer: ending at 10:00 leaves it none.
    problem(hold(sdr, calendar, span(ten - timedelta(minutes=30))), 409, "slot_conflict")
    # No priority takes a buffer over, and a second calendar changes nothing.
    problem(
        hold(exec_assistant, calendar, span(ten + timedelta(minutes=65)), priority=900),
        409,
        "slot_conflict",
    )
    problem(
        hold(sdr, calendar, span(ten + timedelta(minutes=60)), also_calendars=[room]), 409, "slot_conflict"
    )
    # Outside the buffer both sides fit.
    created(hold(sdr, calendar, span(ten + timedelta(minutes=75))))
    created(hold(sdr, calendar, span(ten - timedelta(minutes=45))))


def test_a_buffer_keeps_free_time_around_upstream_busy_time_too(sdr):
    calendar = create_calendar(sdr, name="AE", buffer_before_minutes=10)["id"]
    ten = (server_now() + timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
    BusyBlock.objects.create(
        calendar=Calendar.objects.get(public_id=calendar),
        source="google",
        connection_id=1,
        event_key="dentist",
        start_time=ten,
        end_time=ten + timedelta(minutes=30),
    )

    body = problem(hold(sdr, calendar, span(ten - timedelta(minutes=30))), 409, "slot_conflict")
    assert body["conflicting"]["reason"] == "buffer" and body["conflicting"]["source"] == "google"
    problem(hold(sdr, calendar, span(ten + timedelta(minutes=30))), 409, "slot_conflict")
    created(hold(sdr, calendar, span(ten + timedelta(minutes=40))))


def test_alternatives_offered_with_a_conflict_respect_the_rules(sdr, exec_assistant):
    calendar = create_calendar(
        sdr, name="AE", timezone="Europe/Berlin", working_hours=NINE_TO_FIVE, buffer_after_minutes=30
    )["id"]
    # Thursday 14 January 2027, 16:00-17:00 Berlin (15:00Z): the last hour of the day.
    created(commit(exec_assistant, calendar, span(utc(2027, 1, 14, 15), 60)))

    body = problem(hold(sdr, calendar, span(utc(2027, 1, 14, 15), 60)), 409, "slot_conflict")

    assert body["alternatives"]
    for alternative in body["alternatives"]:
        start = datetime.fromisoformat(alternative["start_time"]).astimezone(ZoneInfo("Europe/Berlin"))
        end = datetime.fromisoformat(alternative["end_time"]).astimezone(ZoneInfo("Europe/Berlin"))
        assert start.weekday() < 5 and start.hour >= 9 and (end.hour, end.minute) <= (17, 0), alternative
        assert end <= utc(2027, 1, 14, 15) - timedelta(minutes=30) or start >= utc(2027, 1, 14, 16, 30)


# --- The override scope -------------------------------------------------------------------------------------


def test_ignoring_the_rules_needs_its_scope_and_is_audited(make_agent):
    allowed = make_agent("ops", scopes=["calendars:write", "bookings:write", "bookings:override_rules"])
    plain = make_agent("plain", scopes=["calendars:write", "bookings:write"])
    calendar = create_calendar(allowed, name="AE", working_hours=NINE_TO_FIVE, min_notice_minutes=600)["id"]
    saturday_soon = span(utc(2027, 1, 9, 3))

    refused = problem(hold(plain, calendar, saturday_soon, ignore_rules=True), 403, "insufficient_scope")
    assert refused["required_scope"] == "bookings:override_rules"
    problem(hold(allowed, calendar, saturday_soon), 422, "outside_working_hours")
    made = created(hold(allowed, calendar, saturday_soon, ignore_rules=True))

    row = audit_rows(event_type="calendar.hold.created", reservation_public_id=made["id"])[0]
    assert row.details["ignored_rules"] is True
    assert audit_rows(event_type="calendar.hold.rejected", failure_reason="insufficient_scope")


def test_committing_a_hold_keeps_what_the_hold_was_given(sdr):
    """A hold made within the rules commits even if its notice has run down since (it was on time)."""
    calendar = create_calendar(sdr, name="AE", min_notice_minutes=60)["id"]
    made = created(hold(sdr, calendar, span(server_now() + timedelta(minutes=61))))
    sdr.client.patch(f"/calendars/{calendar}", json={"min_notice_minutes": 600})

    committed = sdr.client.post(f"/calendars/{calendar}/commits", json={"hold_token": made["hold_token"]})
    assert committed.status_code == 201, committed.text
