"""The Python client moving bookings against the real server: the same booking on a new span on all its
calendars (sync and async), and every refusal typed with its fields while the booking stays put."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from agentcal_client import (
    AgentCal,
    Booking,
    BookingNotLive,
    NoSlotFound,
    PreconditionFailed,
    SlotConflict,
    StaleFencingToken,
)

from bookings.models import Reservation
from tests.clients.helpers import async_agentcal, utc_midnight
from tests.helpers import Persona, run_coroutine
from webhooks.models import OutboxEvent

pytestmark = pytest.mark.django_db(transaction=True)

MakeClient = Callable[..., AgentCal]
HALF_HOUR = timedelta(minutes=30)


def at_hour(hour: float) -> tuple[datetime, datetime]:
    start = utc_midnight(2) + timedelta(hours=hour)
    return start, start + HALF_HOUR


def spans_of(booking_id: str) -> set[tuple[str, datetime, str]]:
    rows = Reservation.objects.filter(booking_id=booking_id).select_related("calendar")
    return {(row.calendar.public_id, row.start_time, row.status) for row in rows}


def test_move_booking_moves_the_same_booking_on_every_calendar(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    ana, ben = client.calendars.create("Ana"), client.calendars.create("Ben")
    booking = client.bookings.commit(ana.id, *at_hour(9), also_calendars=[ben.id], title="Intro")
    new_start, new_end = at_hour(11)

    moved = client.move_booking(booking.id, new_start, new_end, fencing_token=booking.fencing_token)

    assert (moved.id, moved.status, moved.title) == (booking.id, "committed", "Intro")
    assert (moved.start_time, moved.end_time) == (new_start, new_end)
    assert moved.fencing_token > booking.fencing_token
    assert moved.bump_window_ends_at is not None and booking.bump_window_ends_at is not None
    assert moved.bump_window_ends_at > booking.bump_window_ends_at
    assert spans_of(booking.id) == {(ana.id, new_start, "committed"), (ben.id, new_start, "committed")}
    # The old span is free on both calendars at once.
    agentcal_for(exec_assistant).bookings.commit(ben.id, *at_hour(9), also_calendars=[ana.id])
    (event,) = OutboxEvent.objects.filter(event_type="booking.moved")
    assert event.payload["booking"]["id"] == booking.id
    assert event.payload["to"]["start_time"] == new_start.isoformat().replace("+00:00", "Z")


def test_the_async_client_moves_a_booking_and_a_stale_fencing_token_moves_nothing(
    sdr: Persona, live_server: object
) -> None:
    async def move() -> tuple[Booking, Booking, StaleFencingToken]:
        async with async_agentcal(live_server.url, sdr.raw_key) as client:  # type: ignore[attr-defined]
            calendar = await client.calendars.create("Ana")
            booking = await client.bookings.commit(calendar.id, *at_hour(9))
            moved = await client.move_booking(booking.id, *at_hour(10), fencing_token=booking.fencing_token)
            with pytest.raises(StaleFencingToken) as stale:
                # The token it had before the first move: this agent's view is out of date.
                await client.move_booking(booking.id, *at_hour(12), fencing_token=booking.fencing_token)
            return booking, moved, stale.value

    booking, moved, stale = run_coroutine(move())

    assert moved.id == booking.id and moved.start_time == at_hour(10)[0]
    assert stale.status == 409 and stale.code == "stale_fencing_token"
    assert {start for _, start, _ in spans_of(booking.id)} == {at_hour(10)[0]}


def test_a_conflict_is_a_typed_slot_conflict_with_alternatives_and_the_booking_stays(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    ana, ben = client.calendars.create("Ana"), client.calendars.create("Ben")
    booking = client.bookings.commit(ana.id, *at_hour(9), also_calendars=[ben.id])
    agentcal_for(exec_assistant).bookings.commit(ben.id, *at_hour(11))

    with pytest.raises(SlotConflict) as conflict:
        client.move_booking(booking.id, *at_hour(11))

    assert conflict.value.status == 409 and conflict.value.conflicting["calendar"] == ben.id
    assert conflict.value.alternatives, "a conflict names free spans to move to instead"
    assert all(slot.end_time - slot.start_time == HALF_HOUR for slot in conflict.value.alternatives)
    assert at_hour(11)[0] not in {slot.start_time for slot in conflict.value.alternatives}
    after = client.bookings.get(booking.id)
    assert (after.start_time, after.fencing_token) == (booking.start_time, booking.fencing_token)
    # An alternative is a span the booking can move to.
    first = conflict.value.alternatives[0]
    assert client.move_booking(booking.id, first.start_time, first.end_time).start_time == first.start_time


def test_a_stale_if_match_is_a_precondition_failure(sdr: Persona, agentcal_for: MakeClient) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Ana")
    seen = client.calendars.get(calendar.id).version
    booking = client.bookings.commit(calendar.id, *at_hour(9))  # the calendar changes after it was read

    with pytest.raises(PreconditionFailed):
        client.move_booking(booking.id, *at_hour(10), if_match=seen)

    current = client.calendars.get(calendar.id).version
    assert client.move_booking(booking.id, *at_hour(10), if_match=current).start_time == at_hour(10)[0]


def test_a_bumped_booking_moves_back_within_a_day_and_is_not_live_after(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient
) -> None:
    client, rival = agentcal_for(sdr), agentcal_for(exec_assistant)
    calendar = client.calendars.create("Ana", bump_window_seconds=600)
    booking = client.bookings.commit(calendar.id, *at_hour(9), priority=100)
    rival.bookings.commit(calendar.id, *at_hour(9), priority=900)
    assert client.bookings.get(booking.id).status == "bumped"
    (bumped,) = OutboxEvent.objects.filter(event_type="booking.bumped")
    first = bumped.payload["alternatives"][0]

    back = client.move_booking(
        booking.id, datetime.fromisoformat(first["start_time"]), datetime.fromisoformat(first["end_time"])
    )

    assert (back.id, back.status) == (booking.id, "committed")
    assert back.start_time == datetime.fromisoformat(first["start_time"])

    late = client.bookings.commit(calendar.id, *at_hour(13), priority=100)
    rival.bookings.commit(calendar.id, *at_hour(13), priority=900)
    bumped_at = utc_midnight(0) - timedelta(hours=25)
    Reservation.objects.filter(booking_id=late.id).update(ended_at=bumped_at)
    with pytest.raises(BookingNotLive) as gone:
        client.move_booking(late.id, *at_hour(15))
    assert gone.value.booking_status == "bumped" and gone.value.bumped_at == bumped_at
    assert client.bookings.get(late.id).status == "bumped"


def test_reschedule_booking_moves_it_to_the_earliest_time_its_calendars_share(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient, live_server: object
) -> None:
    client = agentcal_for(sdr)
    ana, ben = client.calendars.create("Ana"), client.calendars.create("Ben")
    booking = client.bookings.commit(ana.id, *at_hour(9), also_calendars=[ben.id])
    agentcal_for(exec_assistant).bookings.commit(ben.id, *at_hour(12))  # 12:00-12:30 taken on Ben

    moved = client.reschedule_booking(booking.id, after=at_hour(12)[0], before=at_hour(15)[0])

    assert (moved.id, moved.start_time, moved.end_time) == (booking.id, *at_hour(12.5))
    assert spans_of(booking.id) == {
        (ana.id, at_hour(12.5)[0], "committed"),
        (ben.id, at_hour(12.5)[0], "committed"),
    }

    async def nowhere() -> NoSlotFound:
        async with async_agentcal(live_server.url, sdr.raw_key) as async_client:  # type: ignore[attr-defined]
            with pytest.raises(NoSlotFound) as refused:
                await async_client.reschedule_booking(
                    booking.id, after=at_hour(12)[0], before=at_hour(12.5)[0]
                )
            return refused.value

    assert run_coroutine(nowhere()).reasons
    assert spans_of(booking.id) == {
        (ana.id, at_hour(12.5)[0], "committed"),
        (ben.id, at_hour(12.5)[0], "committed"),
    }
