"""Phase 2: promoting a live hold to a booking."""

from __future__ import annotations

from tests.bookings.helpers import commit_hold, created, hold, problem, rows_of
from tests.helpers import audit_rows, create_calendar, slot


def test_it_commits_a_live_hold_into_a_booking(sdr, calendar):
    held = created(hold(sdr, calendar["id"], slot(), title="Demo"))

    booking = created(commit_hold(sdr, calendar["id"], held["hold_token"]))

    assert booking["id"].startswith("bk_")
    assert booking["status"] == "committed"
    assert booking["hold_id"] == held["id"]
    assert booking["fencing_token"] == held["fencing_token"]
    assert booking["start_time"] == held["start_time"]
    assert booking["end_time"] == held["end_time"]
    assert booking["title"] == "Demo"
    assert booking["committed_at"]
    assert booking["bump_window_ends_at"] > booking["committed_at"]
    assert [r.status for r in rows_of(calendar["id"])] == ["committed"]
    commits = audit_rows(event_type="calendar.commit.created", calendar_public_id=calendar["id"])
    assert [(r.reservation_public_id, r.details["from_hold"]) for r in commits] == [(booking["id"], True)]
    # A restarted agent finds both halves: the hold points at its booking, the booking at its hold.
    hold_now = sdr.client.get(f"/holds/{held['id']}").json()
    assert (hold_now["status"], hold_now["booking_id"]) == ("committed", booking["id"])
    booking_now = sdr.client.get(f"/bookings/{booking['id']}").json()
    assert (booking_now["status"], booking_now["hold_id"]) == ("committed", held["id"])


def test_it_refuses_to_commit_a_hold_twice(sdr, calendar):
    held = created(hold(sdr, calendar["id"], slot()))
    booking = created(commit_hold(sdr, calendar["id"], held["hold_token"]))

    body = problem(commit_hold(sdr, calendar["id"], held["hold_token"]), 409, "hold_already_committed")

    assert body["booking_id"] == booking["id"]
    assert len(rows_of(calendar["id"])) == 1
    assert len(audit_rows(event_type="calendar.commit.created")) == 1
    assert [r.failure_reason for r in audit_rows(event_type="calendar.commit.rejected")] == [
        "hold_already_committed"
    ]


def test_it_refuses_to_commit_another_agents_hold(sdr, make_agent, calendar):
    teammate = make_agent("teammate", priority=100, max_priority=100)
    held = created(hold(sdr, calendar["id"], slot()))

    problem(commit_hold(teammate, calendar["id"], held["hold_token"]), 403, "not_owner")

    assert sdr.client.get(f"/holds/{held['id']}").json()["status"] == "held"


def test_it_does_not_find_a_hold_token_on_another_calendar(sdr):
    first = create_calendar(sdr)
    second = create_calendar(sdr)
    held = created(hold(sdr, first["id"], slot()))

    problem(commit_hold(sdr, second["id"], held["hold_token"]), 404, "not_found")

    assert sdr.client.get(f"/holds/{held['id']}").json()["status"] == "held"
