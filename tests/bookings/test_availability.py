"""GET /calendars/{cal}/availability: what blocks, what is free on the slot grid, and bad windows."""

from __future__ import annotations

from datetime import timedelta, timezone

from tests.bookings.helpers import (
    commit,
    created,
    hold,
    on_grid,
    overlaps,
    parse,
    wait_for_hold_status,
)
from tests.helpers import create_calendar, iso, slot


def _availability(persona, calendar_id, window, **params):
    return persona.client.get(
        f"/calendars/{calendar_id}/availability",
        params={"start": window["start_time"], "end": window["end_time"], **params},
    )


def test_busy_lists_live_holds_and_commits(sdr, exec_assistant, calendar):
    window = slot(minutes=180)
    held = created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=30)))
    booking = created(commit(exec_assistant, calendar["id"], slot(minutes=30, offset_minutes=120)))

    body = _availability(sdr, calendar["id"], window).json()

    assert [(b["id"], b["status"], b["priority"], b["agent_id"]) for b in body["busy"]] == [
        (held["id"], "held", 100, sdr.id),
        (booking["id"], "committed", 500, exec_assistant.id),
    ]
    assert body["busy"][0]["expires_at"] == held["expires_at"]
    assert body["busy"][1]["bump_window_ends_at"] == booking["bump_window_ends_at"]


def test_busy_leaves_out_expired_and_released_holds(sdr, calendar):
    window = slot(minutes=180)
    lapsed = created(hold(sdr, calendar["id"], slot(minutes=30), ttl_seconds=1))
    released = created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=60)))
    live = created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=120)))
    response = sdr.client.request(
        "DELETE", f"/holds/{released['id']}", json={"hold_token": released["hold_token"]}
    )
    assert response.status_code == 200, response.text
    wait_for_hold_status(sdr, lapsed["id"], "expired")

    body = _availability(sdr, calendar["id"], window).json()

    assert [b["id"] for b in body["busy"]] == [live["id"]]


def test_free_slots_are_grid_aligned_and_avoid_busy_time(sdr, calendar):
    window = slot(minutes=180)  # 00:00-03:00 relative, 30-minute grid
    created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=30)))
    created(commit(sdr, calendar["id"], slot(minutes=30, offset_minutes=120)))

    body = _availability(sdr, calendar["id"], window, duration_minutes=60).json()

    free = body["free_slots"]
    for candidate in free:
        assert on_grid(candidate["start_time"], calendar["slot_minutes"])
        assert parse(candidate["end_time"]) - parse(candidate["start_time"]) == timedelta(minutes=60)
        assert not any(overlaps(candidate, busy) for busy in body["busy"]), candidate
    # Only [01:00, 02:00) fits an hour between the hold at 00:30 and the commit at 02:00.
    expected = slot(minutes=60, offset_minutes=60)
    assert [(parse(f["start_time"]), parse(f["end_time"])) for f in free] == [
        (parse(expected["start_time"]), parse(expected["end_time"]))
    ]


def test_free_slots_start_on_the_grid_even_when_the_window_does_not(sdr):
    cal = create_calendar(sdr, slot_minutes=15)
    window = slot(minutes=60, offset_minutes=7)

    body = _availability(sdr, cal["id"], window, duration_minutes=15).json()

    starts = [parse(f["start_time"]) for f in body["free_slots"]]
    assert starts, body
    assert all(on_grid(f["start_time"], 15) for f in body["free_slots"])
    assert starts[0] - parse(window["start_time"]) == timedelta(minutes=8)


def test_a_duration_longer_than_the_calendar_takes_is_refused_not_offered(sdr):
    # Free slots are what a hold could take: a hold that long would be refused as booking_too_long.
    cal = create_calendar(sdr, max_booking_minutes=60)

    response = _availability(sdr, cal["id"], slot(minutes=600), duration_minutes=120)

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "booking_too_long" and body["max_allowed_minutes"] == 60
    assert _availability(sdr, cal["id"], slot(minutes=600), duration_minutes=60).status_code == 200


def test_without_a_duration_free_slots_are_the_gaps(sdr, calendar):
    window = slot(minutes=120)
    created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=30)))

    free = _availability(sdr, calendar["id"], window).json()["free_slots"]

    start = parse(window["start_time"])
    assert [(parse(f["start_time"]) - start, parse(f["end_time"]) - start) for f in free] == [
        (timedelta(0), timedelta(minutes=30)),
        (timedelta(minutes=60), timedelta(minutes=120)),
    ]


def test_it_rejects_a_bad_window_as_invalid_range(sdr, calendar):
    window = slot(minutes=60)
    start, end = window["start_time"], window["end_time"]
    bad_windows = {
        "end_equals_start": {"start": start, "end": start},
        "end_before_start": {"start": end, "end": start},
        "naive_start": {"start": start.removesuffix("Z"), "end": end},
        "naive_both": {"start": start.removesuffix("Z"), "end": end.removesuffix("Z")},
    }

    responses = {
        shape: sdr.client.get(f"/calendars/{calendar['id']}/availability", params=params)
        for shape, params in bad_windows.items()
    }

    for shape, response in responses.items():
        assert response.status_code == 400, (shape, response.text)
        assert response.json()["error"] == "invalid_range", (shape, response.json())


def test_it_accepts_an_explicit_non_utc_offset(sdr, calendar):
    window = slot(minutes=60)
    start = parse(window["start_time"])
    plus_two = timezone(timedelta(hours=2))
    response = sdr.client.get(
        f"/calendars/{calendar['id']}/availability",
        params={"start": start.astimezone(plus_two).isoformat(), "end": iso(start + timedelta(hours=1))},
    )

    assert response.status_code == 200, response.text
    assert parse(response.json()["start"]) == start
