"""Optimistic concurrency: availability ETag is the calendar version; If-Match makes a write conditional."""

from __future__ import annotations

from tests.bookings.helpers import commit, created, hold, problem, rows_of
from tests.helpers import audit_rows, slot


def _availability(persona, calendar_id, span):
    response = persona.client.get(
        f"/calendars/{calendar_id}/availability",
        params={"start": span["start_time"], "end": span["end_time"]},
    )
    assert response.status_code == 200, response.text
    return response


def test_it_accepts_a_hold_whose_if_match_is_the_availability_etag(sdr, calendar):
    span = slot()
    before = _availability(sdr, calendar["id"], span)
    version = before.json()["version"]
    assert isinstance(version, int)
    assert before.headers["ETag"] == f'"{version}"'

    held = created(
        sdr.client.post(f"/calendars/{calendar['id']}/holds", json=span, headers={"If-Match": f'"{version}"'})
    )

    assert held["status"] == "held"
    after = _availability(sdr, calendar["id"], span)
    assert after.json()["version"] > version
    assert [b["id"] for b in after.json()["busy"]] == [held["id"]]


def test_it_refuses_a_stale_if_match_with_412_and_writes_nothing(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    stale = _availability(sdr, calendar["id"], span).json()["version"]
    # Someone else changes the calendar (elsewhere in time) after sdr read it.
    created(hold(rival, calendar["id"], slot(minutes=30, offset_minutes=120)))
    current = _availability(sdr, calendar["id"], span).json()["version"]
    assert current != stale
    rows_before = len(rows_of(calendar["id"]))

    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=span, headers={"If-Match": f'"{stale}"'}
    )

    body = problem(response, 412, "precondition_failed")
    assert body["current_version"] == current
    assert len(rows_of(calendar["id"])) == rows_before
    assert rows_of(calendar["id"], agent__public_id=sdr.id) == []
    assert _availability(sdr, calendar["id"], span).json()["version"] == current
    rejected = audit_rows(event_type="calendar.hold.rejected", calendar_public_id=calendar["id"])
    assert [(r.failure_reason, r.http_status) for r in rejected] == [("precondition_failed", 412)]
    assert rejected[0].conflict_details["current_version"] == current


def test_it_refuses_a_direct_commit_with_a_stale_if_match(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    stale = _availability(sdr, calendar["id"], span).json()["version"]
    created(commit(rival, calendar["id"], slot(minutes=30, offset_minutes=120)))

    response = sdr.client.post(
        f"/calendars/{calendar['id']}/commits", json=span, headers={"If-Match": f'"{stale}"'}
    )

    problem(response, 412, "precondition_failed")
    assert rows_of(calendar["id"], agent__public_id=sdr.id) == []
    assert [r.failure_reason for r in audit_rows(event_type="calendar.commit.rejected")] == [
        "precondition_failed"
    ]


def test_a_rejected_write_does_not_change_the_version(sdr, make_agent, calendar):
    peer = make_agent("peer", priority=100, max_priority=100)
    span = slot()
    created(hold(sdr, calendar["id"], span))
    version = _availability(sdr, calendar["id"], span).json()["version"]

    problem(hold(peer, calendar["id"], span), 409, "slot_conflict")

    assert _availability(sdr, calendar["id"], span).json()["version"] == version
    # So an agent that read the version before the refused attempt can still write with it.
    elsewhere = slot(minutes=30, offset_minutes=60)
    response = peer.client.post(
        f"/calendars/{calendar['id']}/holds", json=elsewhere, headers={"If-Match": f'"{version}"'}
    )
    assert response.status_code == 201, response.text


def test_the_version_changes_when_a_reservation_changes_state(sdr, calendar):
    span = slot()
    held = created(hold(sdr, calendar["id"], span))
    before = _availability(sdr, calendar["id"], span).json()["version"]

    released = sdr.client.request("DELETE", f"/holds/{held['id']}", json={"hold_token": held["hold_token"]})

    assert released.status_code == 200, released.text
    assert _availability(sdr, calendar["id"], span).json()["version"] > before
