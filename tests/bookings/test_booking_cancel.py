"""Cancelling a booking: only its own agent may, and the slot is free again afterwards."""

from __future__ import annotations

from tests.bookings.helpers import commit, created, problem, rows_of
from tests.helpers import audit_rows, create_calendar, slot


def test_its_agent_cancels_a_booking_and_frees_the_slot(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    booking = created(commit(sdr, calendar["id"], span))

    response = sdr.client.delete(f"/bookings/{booking['id']}")

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
    assert response.json()["ended_at"] is not None
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["status"] == "cancelled"
    cancelled = audit_rows(event_type="calendar.booking.cancelled", reservation_public_id=booking["id"])
    assert [(r.agent_public_id, r.outcome) for r in cancelled] == [(sdr.id, "success")]
    created(commit(rival, calendar["id"], span))  # the slot is free again


def test_another_agent_of_the_workspace_cannot_cancel_it(sdr, make_agent, calendar):
    teammate = make_agent("teammate", priority=100, max_priority=100)
    booking = created(commit(sdr, calendar["id"], slot()))

    problem(teammate.client.delete(f"/bookings/{booking['id']}"), 403, "not_owner")

    assert sdr.client.get(f"/bookings/{booking['id']}").json()["status"] == "committed"
    rejected = audit_rows(event_type="calendar.booking.cancel.rejected", reservation_public_id=booking["id"])
    assert [(r.agent_public_id, r.failure_reason) for r in rejected] == [(teammate.id, "not_owner")]
    assert audit_rows(event_type="calendar.booking.cancelled") == []


def test_cancelling_twice_is_harmless(sdr, calendar):
    booking = created(commit(sdr, calendar["id"], slot()))
    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200

    again = sdr.client.delete(f"/bookings/{booking['id']}")

    assert again.status_code == 200, again.text
    assert again.json()["status"] == "cancelled"
    assert len(audit_rows(event_type="calendar.booking.cancelled")) == 1


def test_a_bumped_booking_cannot_be_cancelled(sdr, exec_assistant):
    cal = create_calendar(sdr, bump_window_seconds=600)
    span = slot()
    victim = created(commit(sdr, cal["id"], span))
    created(commit(exec_assistant, cal["id"], span))

    response = sdr.client.delete(f"/bookings/{victim['id']}")

    body = problem(response, 409, "booking_not_live")
    assert body["booking_id"] == victim["id"]
    assert [r.status for r in rows_of(cal["id"], booking_id=victim["id"])] == ["bumped"]
    assert body["status"] == 409, body  # RFC 9457: the HTTP status, not the booking's state
