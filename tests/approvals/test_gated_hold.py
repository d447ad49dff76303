"""An approval with `hold_id` gates a booking: the hold keeps blocking while a person decides, approve
commits it server-side, deny and cancel release it."""

from __future__ import annotations

import time

from approvals.models import Approval
from approvals.services import approval_decide
from tests.approvals.helpers import gated_hold, problem
from tests.bookings.helpers import parse
from tests.helpers import audit_rows
from webhooks.models import OutboxEvent


def test_the_gated_hold_stays_live_and_blocking_past_its_ttl_while_pending(sdr, make_agent):
    rival = make_agent("rival", priority=100)  # same priority: may not take a live hold over
    calendar, hold, approval = gated_hold(sdr, calendar_settings={"hold_ttl_seconds": 1})
    assert parse(sdr.client.get(f"/holds/{hold['id']}").json()["expires_at"]) == parse(approval["expires_at"])

    time.sleep(2.2)  # twice the calendar's TTL
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "held"
    span = {"start_time": hold["start_time"], "end_time": hold["end_time"]}
    blocked = rival.client.post(f"/calendars/{calendar['id']}/holds", json=span)
    body = problem(blocked, 409, "slot_conflict")
    assert body["conflicting"]["agent_id"] == sdr.id and body["conflicting"]["status"] == "held"
    pin = audit_rows(event_type="calendar.hold.extended", reservation_public_id=hold["id"])
    assert pin[-1].details["reason"] == f"approval {approval['id']}"


def test_approving_commits_the_hold_and_the_approval_carries_the_booking(sdr, owner):
    calendar, hold, approval = gated_hold(sdr)
    decided = approval_decide(
        approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=True, note="Go ahead"
    )
    assert decided.status == "approved" and decided.booking_id == "bk_" + hold["id"].removeprefix("hld_")

    body = sdr.client.get(f"/approvals/{approval['id']}").json()
    assert body["status"] == "approved"
    assert body["booking_id"] == decided.booking_id and body["booking_error"] == ""
    assert body["decided_by"] == "olivia@acme.test" and body["note"] == "Go ahead"
    booking = sdr.client.get(f"/bookings/{decided.booking_id}")
    assert booking.status_code == 200 and booking.json()["status"] == "committed"
    assert booking.json()["agent_id"] == sdr.id

    (approved,) = audit_rows(event_type="approval.approved")
    assert approved.actor_user == "olivia@acme.test" and approved.agent_public_id == sdr.id
    (commit,) = audit_rows(event_type="calendar.commit.created")
    assert commit.actor_user == "olivia@acme.test" and commit.reservation_public_id == decided.booking_id
    (event,) = OutboxEvent.objects.filter(event_type="approval.approved")
    assert event.payload["approval"]["booking_id"] == decided.booking_id


def test_denying_releases_the_hold(sdr, owner):
    calendar, hold, approval = gated_hold(sdr)
    decided = approval_decide(
        approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=False, note="Not now"
    )
    assert decided.status == "denied" and decided.booking_id is None
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "released"
    body = sdr.client.get(f"/approvals/{approval['id']}").json()
    assert (
        body["status"] == "denied" and body["decided_by"] == "olivia@acme.test" and body["note"] == "Not now"
    )
    (denied,) = OutboxEvent.objects.filter(event_type="approval.denied")
    assert denied.payload["approval"]["status"] == "denied"
    (released,) = audit_rows(event_type="calendar.hold.released")
    assert released.actor_user == "olivia@acme.test"


def test_cancelling_releases_the_hold(sdr):
    calendar, hold, approval = gated_hold(sdr)
    response = sdr.client.post(f"/approvals/{approval['id']}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "released"


def test_approving_after_the_hold_was_evicted_records_hold_evicted(sdr, exec_assistant, owner):
    calendar, hold, approval = gated_hold(sdr)
    span = {"start_time": hold["start_time"], "end_time": hold["end_time"]}
    takeover = exec_assistant.client.post(f"/calendars/{calendar['id']}/holds", json=span)
    assert takeover.status_code == 201, takeover.text  # strictly higher priority takes a live hold over

    decided = approval_decide(
        approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=True
    )
    assert decided.status == "approved"
    assert decided.booking_id is None and decided.booking_error == "hold_evicted"
    body = sdr.client.get(f"/approvals/{approval['id']}").json()
    assert body["status"] == "approved" and body["booking_error"] == "hold_evicted"
    (event,) = OutboxEvent.objects.filter(event_type="approval.approved")
    assert event.payload["approval"]["booking_error"] == "hold_evicted"
    assert Approval.objects.get(public_id=approval["id"]).version == 3  # pending -> approved -> settled


def test_the_agent_cannot_bypass_the_gate_by_extending_committing_or_releasing(sdr, owner):
    calendar, hold, approval = gated_hold(sdr)
    token = {"hold_token": hold["hold_token"]}
    for response in (
        sdr.client.post(f"/holds/{hold['id']}/extend", json={**token, "ttl_seconds": 5}),
        sdr.client.post(f"/calendars/{calendar['id']}/commits", json=token),
        sdr.client.request("DELETE", f"/holds/{hold['id']}", json=token),
    ):
        body = problem(response, 409, "hold_awaiting_approval")
        assert body["approval_id"] == approval["id"]
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "held"
    # The decision still works, and only it.
    approval_decide(approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=True)
    assert sdr.client.get(f"/approvals/{approval['id']}").json()["booking_id"]
