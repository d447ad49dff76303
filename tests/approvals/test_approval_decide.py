"""approval_decide: only a signed-in member, only while pending, and exactly one of two people wins."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now

from agentcal.errors import ApprovalAlreadyDecided, ApprovalExpired, NotAMember, NotFound
from approvals.models import Approval
from approvals.services import approval_decide
from tests.approvals.helpers import created, gated_hold, request_approval
from tests.helpers import audit_rows

pytestmark = pytest.mark.slow


@pytest.mark.concurrency
def test_two_people_deciding_at_once_one_wins_and_the_other_learns_who(sdr, owner, teammate):
    calendar, hold, approval = gated_hold(sdr)
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def decide(user, approve):
        try:
            barrier.wait()
            outcomes[user.email] = approval_decide(
                approval_id=approval["id"], workspace=sdr.agent.workspace, user=user, approve=approve
            )
        except Exception as exc:
            outcomes[user.email] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(owner, True)),
        threading.Thread(target=decide, args=(teammate, False)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = {email: o for email, o in outcomes.items() if isinstance(o, Approval)}
    losers = {email: o for email, o in outcomes.items() if isinstance(o, ApprovalAlreadyDecided)}
    assert len(winners) == 1 and len(losers) == 1, outcomes
    (winner_email, winner), (_, refusal) = next(iter(winners.items())), next(iter(losers.items()))
    assert refusal.decided_by_email == winner_email
    assert refusal.approval_status == winner.status and refusal.decided_at == winner.decided_at
    assert refusal.problem()["decided_by"] == winner_email

    row = Approval.objects.get(public_id=approval["id"])
    assert row.status == winner.status and row.decided_by_email == winner_email
    hold_status = sdr.client.get(f"/holds/{hold['id']}").json()["status"]
    assert hold_status == ("committed" if winner.status == "approved" else "released")
    assert len(audit_rows(event_type=f"approval.{winner.status}")) == 1
    (rejected,) = audit_rows(event_type="approval.decide.rejected")
    assert rejected.failure_reason == "approval_already_decided" and rejected.actor_user != winner_email


def test_a_decided_approval_cannot_be_decided_again(sdr, owner, teammate):
    approval = created(request_approval(sdr))
    approval_decide(approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=False)
    with pytest.raises(ApprovalAlreadyDecided) as refused:
        approval_decide(
            approval_id=approval["id"], workspace=sdr.agent.workspace, user=teammate, approve=True
        )
    assert refused.value.approval_status == "denied"
    assert refused.value.decided_by_email == "olivia@acme.test"
    assert "olivia@acme.test" in str(refused.value)


def test_a_cancelled_approval_cannot_be_decided(sdr, owner):
    approval = created(request_approval(sdr))
    sdr.client.post(f"/approvals/{approval['id']}/cancel")
    with pytest.raises(ApprovalAlreadyDecided) as refused:
        approval_decide(approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=True)
    assert refused.value.approval_status == "cancelled" and refused.value.decided_by_email is None


def test_an_expired_approval_is_refused_and_reads_as_expired_before_the_sweep(sdr, owner):
    approval = created(request_approval(sdr, expires_in_seconds=60))
    Approval.objects.filter(public_id=approval["id"]).update(
        created_at=Now() - timedelta(minutes=5), expires_at=Now() - timedelta(seconds=1)
    )
    body = sdr.client.get(f"/approvals/{approval['id']}").json()
    assert body["status"] == "expired" and body["decided_at"] == body["expires_at"]
    listed = sdr.client.get("/approvals", params={"status": "expired"}).json()["results"]
    assert [a["id"] for a in listed] == [approval["id"]]
    assert sdr.client.get("/approvals", params={"status": "pending"}).json()["results"] == []

    with pytest.raises(ApprovalExpired):
        approval_decide(approval_id=approval["id"], workspace=sdr.agent.workspace, user=owner, approve=True)
    assert Approval.objects.get(public_id=approval["id"]).status == "pending"  # left for the sweep
    problem = sdr.client.post(f"/approvals/{approval['id']}/cancel")
    assert problem.status_code == 409 and problem.json()["error"] == "approval_expired"


def test_only_members_of_the_workspace_decide(sdr, outsider, make_person):
    stranger = make_person("eve@globex.test", workspace=outsider.agent.workspace, role="owner")
    approval = created(request_approval(sdr))
    with pytest.raises(NotAMember):
        approval_decide(
            approval_id=approval["id"], workspace=sdr.agent.workspace, user=stranger, approve=True
        )
    with pytest.raises(NotFound):  # acme's approval does not exist in globex
        approval_decide(
            approval_id=approval["id"], workspace=outsider.agent.workspace, user=stranger, approve=True
        )
    assert Approval.objects.get(public_id=approval["id"]).status == "pending"
    assert {r.failure_reason for r in audit_rows(event_type="approval.decide.rejected")} == {
        "not_a_member",
        "not_found",
    }
