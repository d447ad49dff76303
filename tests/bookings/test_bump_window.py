"""A commit may be bumped by a strictly higher priority only inside its bump window; then it is frozen."""

from __future__ import annotations

from tests.bookings.helpers import commit, created, parse, problem, rows_of, wait_until_frozen
from tests.helpers import audit_rows, create_calendar, slot


def test_it_refuses_any_priority_once_the_booking_is_frozen(sdr, exec_assistant):
    cal = create_calendar(sdr, bump_window_seconds=2)
    span = slot()
    booking = created(commit(sdr, cal["id"], span, priority=100))
    assert booking["frozen"] is False
    assert (parse(booking["bump_window_ends_at"]) - parse(booking["committed_at"])).total_seconds() == 2

    wait_until_frozen(sdr, booking["id"])
    body = problem(commit(exec_assistant, cal["id"], span, priority=900), 409, "slot_conflict")

    assert body["held_by_priority"] == 100
    assert body["caller_priority"] == 900
    assert body["retryable"] is False
    assert body["conflicting"]["status"] == "committed"
    assert body["conflicting"]["agent_id"] == sdr.id
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["status"] == "committed"
    assert [r.status for r in rows_of(cal["id"])] == ["committed"]
    assert audit_rows(event_type="calendar.booking.bumped", calendar_public_id=cal["id"]) == []
    rejected = audit_rows(event_type="calendar.commit.rejected", calendar_public_id=cal["id"])
    assert [(r.agent_public_id, r.failure_reason) for r in rejected] == [(exec_assistant.id, "slot_conflict")]


def test_it_bumps_a_booking_inside_its_bump_window(sdr, exec_assistant):
    cal = create_calendar(sdr, bump_window_seconds=600)
    span = slot()
    victim = created(commit(sdr, cal["id"], span, priority=100))

    winner = created(commit(exec_assistant, cal["id"], span, priority=900))

    assert winner["status"] == "committed"
    assert winner["displaced"] == [
        {"id": victim["id"], "status": "bumped", "agent_id": sdr.id, "priority": 100}
    ]
    victim_now = sdr.client.get(f"/bookings/{victim['id']}").json()
    assert victim_now["status"] == "bumped"
    assert victim_now["ended_at"] is not None
    bumped = audit_rows(event_type="calendar.booking.bumped", calendar_public_id=cal["id"])
    assert len(bumped) == 1
    assert bumped[0].reservation_public_id == victim["id"]
    assert bumped[0].details["displaced_by"] == winner["id"]
    assert bumped[0].details["victim_agent_id"] == sdr.id
    created_row = audit_rows(event_type="calendar.commit.created", reservation_public_id=winner["id"])
    assert created_row[0].details["displaced"] == [victim["id"]]


def test_it_does_not_bump_inside_the_window_at_equal_priority(sdr, make_agent):
    peer = make_agent("peer", priority=100, max_priority=100)
    cal = create_calendar(sdr, bump_window_seconds=600)
    span = slot()
    first = created(commit(sdr, cal["id"], span, priority=100))

    body = problem(commit(peer, cal["id"], span, priority=100), 409, "slot_conflict")

    assert body["held_by_priority"] == body["caller_priority"] == 100
    assert body["conflicting"]["bump_window_ends_at"] == first["bump_window_ends_at"]
    assert sdr.client.get(f"/bookings/{first['id']}").json()["status"] == "committed"


def test_a_booking_keeps_the_bump_window_it_was_given(sdr, exec_assistant):
    cal = create_calendar(sdr, bump_window_seconds=1)
    span = slot()
    booking = created(commit(sdr, cal["id"], span, priority=100))

    # Lengthening the calendar's window later applies to future commits only.
    patched = sdr.client.patch(f"/calendars/{cal['id']}", json={"bump_window_seconds": 600})
    assert patched.status_code == 200, patched.text
    frozen = wait_until_frozen(sdr, booking["id"])

    assert frozen["bump_window_ends_at"] == booking["bump_window_ends_at"]
    problem(commit(exec_assistant, cal["id"], span, priority=900), 409, "slot_conflict")
