"""The requesting agent's webhook endpoint hears about its approval, with its `state` echoed."""

from __future__ import annotations

import pytest
from standardwebhooks import Webhook

from approvals.services import approval_decide
from tests.approvals.helpers import gated_hold

pytestmark = pytest.mark.slow


def test_the_agent_receives_approval_requested_and_approved_with_its_state(
    sdr, owner, receiver, celery_worker
):
    endpoint = sdr.client.post("/webhook-endpoints", json={"url": receiver.url, "events": ["approval.*"]})
    assert endpoint.status_code == 201, endpoint.text
    state = {"conversation": "thr_42", "next_step": "send_invite"}
    calendar, hold, approval = gated_hold(sdr, state=state)
    receiver.wait_for(1)
    decided = approval_decide(
        approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=True
    )

    requests = receiver.wait_for(2)
    payloads = [Webhook(endpoint.json()["secret"]).verify(r.body, r.headers) for r in requests]
    assert [p["type"] for p in payloads] == ["approval.requested", "approval.approved"]
    requested, approved = (p["data"]["approval"] for p in payloads)
    assert requested["id"] == approved["id"] == approval["id"]
    assert requested["state"] == approved["state"] == state
    assert requested["status"] == "pending" and requested["hold_id"] == hold["id"]
    assert approved["status"] == "approved" and approved["booking_id"] == decided.booking_id
    assert approved["decided_by"] == "olivia@acme.test"
