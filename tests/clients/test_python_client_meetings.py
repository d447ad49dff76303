"""The Python client scheduling across people against the real server: hold_meeting (sync and async)
holds the best time on every calendar, and the rules' refusals arrive as typed errors with their fields."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from agentcal_client import (
    AgentCal,
    Booking,
    FoundHold,
    InsufficientNotice,
    NoSlotFound,
    OutsideWorkingHours,
    SlotConflict,
)

from bookings.models import Reservation
from tests.clients.helpers import async_agentcal, every_day, utc_midnight
from tests.helpers import Persona, run_coroutine

pytestmark = pytest.mark.django_db(transaction=True)

MakeClient = Callable[..., AgentCal]
HALF_HOUR = timedelta(minutes=30)


def test_hold_meeting_holds_the_first_time_inside_everyones_hours_on_every_calendar(
    sdr: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    berlin = client.calendars.create(
        "Ana", timezone="Europe/Berlin", working_hours=every_day("09:00", "17:00")
    )
    new_york = client.calendars.create(
        "Ben", timezone="America/New_York", working_hours=every_day("09:00", "17:00")
    )
    day = utc_midnight(2)
    opens_in_new_york = datetime.combine(
        day.date(), datetime.min.time(), ZoneInfo("America/New_York")
    ).replace(hour=9)
    # Ana is busy at New York's first half hour: the best common time is the one after it.
    client.bookings.commit(berlin.id, opens_in_new_york, opens_in_new_york + HALF_HOUR)

    hold = client.hold_meeting(
        [berlin.id, new_york.id], HALF_HOUR, day, day + timedelta(days=1), title="Sync", ttl_seconds=120
    )

    assert (hold.start_time, hold.end_time) == (
        opens_in_new_york + HALF_HOUR,
        opens_in_new_york + 2 * HALF_HOUR,
    )
    assert {share.calendar for share in hold.calendars} == {berlin.id, new_york.id}
    assert hold.status == "held" and hold.hold_token and hold.title == "Sync"
    assert hold.candidate_rank == 1
    assert hold.searched is not None and hold.searched.start == day
    booking = client.holds.commit(hold)
    assert booking.status == "committed"
    rows = Reservation.objects.filter(booking_id=booking.id)
    assert {row.calendar.public_id for row in rows} == {berlin.id, new_york.id}


def test_the_async_client_holds_a_meeting_and_commits_it(sdr: Persona, live_server: object) -> None:
    day = utc_midnight(2)

    async def book() -> tuple[FoundHold, Booking]:
        async with async_agentcal(live_server.url, sdr.raw_key) as client:  # type: ignore[attr-defined]
            ana = await client.calendars.create("Ana", working_hours=every_day("10:00", "12:00"))
            ben = await client.calendars.create("Ben", working_hours=every_day("11:00", "15:00"))
            hold = await client.hold_meeting([ana.id, ben.id], HALF_HOUR, day, day + timedelta(days=1))
            return hold, await client.holds.commit(hold)

    hold, booking = run_coroutine(book())

    assert hold.start_time == day + timedelta(hours=11) and hold.candidate_rank == 1
    assert booking.hold_id == hold.id and booking.start_time == hold.start_time


def test_no_common_time_is_a_typed_no_slot_found_with_its_reasons(
    sdr: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    early = client.calendars.create("Early", working_hours=every_day("08:00", "10:00"))
    late = client.calendars.create("Late", working_hours=every_day("14:00", "18:00"))
    day = utc_midnight(2)

    with pytest.raises(NoSlotFound) as caught:
        client.hold_meeting([early.id, late.id], HALF_HOUR, day, day + timedelta(days=1))

    assert caught.value.status == 409
    assert caught.value.reasons == {"no_common_working_hours": True}
    assert caught.value.searched is not None and caught.value.searched.start == day
    assert not Reservation.objects.filter(calendar__public_id__in=[early.id, late.id]).exists()


def test_a_hold_outside_working_hours_is_typed_with_the_local_time_and_hours(
    sdr: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    kolkata = client.calendars.create(
        "Cleo", timezone="Asia/Kolkata", working_hours=every_day("09:00", "17:00")
    )
    assert kolkata.working_hours == every_day("09:00", "17:00") and kolkata.min_notice_minutes == 0
    night = utc_midnight(2)  # 05:30 in Kolkata

    with pytest.raises(OutsideWorkingHours) as caught:
        client.holds.create(kolkata.id, night, night + HALF_HOUR)

    refused = caught.value
    assert (refused.status, refused.calendar, refused.timezone) == (422, kolkata.id, "Asia/Kolkata")
    assert refused.local_start_time == night
    assert refused.local_start_time is not None and refused.local_start_time.utcoffset() == timedelta(
        hours=5, minutes=30
    )
    assert refused.hours_that_day == {
        f"{night.astimezone(ZoneInfo('Asia/Kolkata')):%Y-%m-%d}": [["09:00", "17:00"]]
    }
    assert client.calendars.update(kolkata.id, clear_working_hours=True).working_hours is None
    assert client.holds.create(kolkata.id, night, night + HALF_HOUR).status == "held"


def test_notice_and_buffers_are_typed_too(sdr: Persona, agentcal_for: MakeClient) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Desk", min_notice_minutes=3 * 24 * 60, buffer_after_minutes=15)
    soon = utc_midnight(2)

    with pytest.raises(InsufficientNotice) as too_soon:
        client.holds.create(calendar.id, soon, soon + HALF_HOUR)
    later = utc_midnight(5)
    client.bookings.commit(calendar.id, later, later + HALF_HOUR)
    with pytest.raises(SlotConflict) as in_buffer:
        client.holds.create(calendar.id, later + HALF_HOUR, later + 2 * HALF_HOUR)

    notice = too_soon.value
    assert (notice.calendar, notice.min_notice_minutes) == (calendar.id, 3 * 24 * 60)
    assert notice.server_time is not None and notice.earliest_start_time is not None
    assert notice.earliest_start_time - notice.server_time >= timedelta(days=3)
    assert in_buffer.value.reason == "buffer" and in_buffer.value.conflicting["buffer_minutes"] == 15
    assert client.calendars.get(calendar.id).buffer_after_minutes == 15
