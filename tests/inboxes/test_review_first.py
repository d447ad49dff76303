"""Review first: every send becomes an approval whose evidence is the draft; it reaches the relay only when a
person approves, and never when they deny it, it expires or the agent withdraws it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F
from django.utils import timezone

from approvals import services as approval_services
from approvals.models import Approval
from approvals.services import approval_decide, approvals_expire_due
from inboxes import review
from inboxes.delivery import message_deliver
from inboxes.models import Message, MessageStatus
from tests.helpers import audit_rows
from tests.inboxes.helpers import address_of, deliver_raw, mail
from tests.inboxes.test_sending import sink  # noqa: F401 (fixture)
from tests.webhooks.helpers import wait_until
from webhooks.models import OutboxEvent


@pytest.fixture
def reviewed(sdr):
    sdr.agent.inbox_review_first = True
    sdr.agent.save(update_fields=["inbox_review_first"])
    return sdr


def agent_mail(relay: Any) -> list[Any]:
    """What the relay got from the agent (owners' approval notifications go through it too)."""
    return [
        (envelope, sent) for envelope, sent in relay.received if sent["From"].addresses[0].username == "sdr"
    ]


def draft(persona, **fields: Any) -> dict[str, Any]:
    body = {
        "to": ["ana@example.com"],
        "cc": ["bo@example.org"],
        "subject": "Proposal",
        "text": "Terms.",
        **fields,
    }
    response = persona.client.post("/inbox/send", json=body)
    assert response.status_code == 202, response.text
    shown = response.json()
    assert shown["status"] == "awaiting_approval" and shown["approval_id"].startswith("appr_"), shown
    return shown


def test_a_send_waits_for_approval_with_the_draft_as_evidence(reviewed, sink):  # noqa: F811
    shown = draft(reviewed, html="<p>Terms.</p>")

    approval = Approval.objects.get(public_id=shown["approval_id"])
    assert approval.status == "pending" and approval.agent_id == reviewed.agent.pk
    assert approval.summary == "Send email: Proposal"
    assert approval.evidence == {
        "message": shown["id"],
        "to": ["ana@example.com"],
        "cc": ["bo@example.org"],
        "subject": "Proposal",
        "text": "Terms.",
        "html": "<p>Terms.</p>",
        "in_reply_to": None,
    }
    message = Message.objects.get(public_id=shown["id"])
    assert message.status == MessageStatus.AWAITING_APPROVAL and message.approval_id == approval.public_id
    # Even a delivery task run by mistake does not send it.
    assert message_deliver(message.pk) is None
    assert agent_mail(sink) == []
    (row,) = audit_rows(event_type="inbox.message.awaiting_approval")
    assert row.details["message"] == shown["id"]
    assert not audit_rows(event_type="inbox.message.queued")
    assert reviewed.client.get("/inbox").json()["review_first"] is True
    listed = reviewed.client.get(f"/inbox/messages/{shown['id']}").json()
    assert listed["status"] == "awaiting_approval" and listed["approval_id"] == approval.public_id


@pytest.mark.slow
def test_approved_it_is_delivered_through_the_relay(reviewed, owner, sink, celery_worker):  # noqa: F811
    shown = draft(reviewed)
    approval_decide(
        approval_id=shown["approval_id"], workspace=reviewed.agent.workspace, user=owner, approve=True
    )

    wait_until(lambda: Message.objects.get(public_id=shown["id"]).status == MessageStatus.SENT)
    ((envelope, sent),) = agent_mail(sink)
    assert envelope == ["ana@example.com", "bo@example.org"]
    assert sent["Subject"] == "Proposal" and sent.get_content().strip() == "Terms."
    queued = audit_rows(event_type="inbox.message.queued")
    assert [(r.actor_user, r.details["approval_id"]) for r in queued] == [(owner.email, shown["approval_id"])]
    assert OutboxEvent.objects.filter(event_type="message.sent").count() == 1


@pytest.mark.parametrize("ending", ["denied", "expired", "cancelled"])
def test_denied_expired_or_withdrawn_it_is_discarded_and_never_sent(reviewed, owner, sink, ending):  # noqa: F811
    shown = draft(reviewed)
    if ending == "denied":
        approval_decide(
            approval_id=shown["approval_id"], workspace=reviewed.agent.workspace, user=owner, approve=False
        )
    elif ending == "expired":
        Approval.objects.filter(public_id=shown["approval_id"]).update(
            created_at=F("created_at") - timedelta(days=2), expires_at=F("expires_at") - timedelta(days=1)
        )
        assert approvals_expire_due() == 1
    else:
        assert reviewed.client.post(f"/approvals/{shown['approval_id']}/cancel").status_code == 200

    message = Message.objects.get(public_id=shown["id"])
    assert message.status == MessageStatus.DISCARDED
    assert message_deliver(message.pk) is None
    assert agent_mail(sink) == []
    (row,) = audit_rows(event_type="inbox.message.discarded")
    assert row.failure_reason == f"approval_{ending}" and row.details["message"] == shown["id"]
    assert row.actor_user == (owner.email if ending == "denied" else "")
    assert not OutboxEvent.objects.filter(event_type__in=["message.sent", "message.failed"]).exists()
    assert reviewed.client.get(f"/inbox/messages/{shown['id']}").json()["status"] == "discarded"


def test_a_reply_is_reviewed_too(reviewed):
    (parent,) = deliver_raw(
        mail(address_of(reviewed), subject="Line one", message_id="one@example.com").as_bytes(),
        [address_of(reviewed)],
    )
    response = reviewed.client.post(f"/inbox/messages/{parent.public_id}/reply", json={"text": "Sure."})
    assert response.status_code == 202, response.text
    approval = Approval.objects.get(public_id=response.json()["approval_id"])
    assert approval.summary == "Send email: Re: Line one"
    assert approval.evidence["in_reply_to"] == parent.message_id and approval.evidence["to"] == [
        "ana@example.com"
    ]


def test_drafts_count_against_the_quota_until_discarded(reviewed, owner):  # noqa: F811
    reviewed.agent.inbox_burst_limit = 1
    reviewed.agent.save(update_fields=["inbox_burst_limit"])
    shown = draft(reviewed)
    assert (
        reviewed.client.post(
            "/inbox/send", json={"to": ["a@example.com"], "subject": "", "text": ""}
        ).status_code
        == 429
    )
    approval_decide(
        approval_id=shown["approval_id"], workspace=reviewed.agent.workspace, user=owner, approve=False
    )
    draft(reviewed)


def test_a_decision_made_before_the_draft_is_linked_still_applies(reviewed, owner, sink, monkeypatch):  # noqa: F811
    """A person may decide between the approval's creation and its link to the draft: the link finds the
    decision and applies it."""

    def request_then_decide(**kwargs: Any) -> Approval:
        approval = approval_services.approval_request(**kwargs)
        approval_decide(
            approval_id=approval.public_id, workspace=approval.workspace, user=owner, approve=False
        )
        return approval

    monkeypatch.setattr(review, "approval_request", request_then_decide)
    response = reviewed.client.post(
        "/inbox/send", json={"to": ["a@example.com"], "subject": "S", "text": "T"}
    )
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "discarded"
    message = Message.objects.get(public_id=response.json()["id"])
    assert message.status == MessageStatus.DISCARDED and message.approval_id == response.json()["approval_id"]
    assert len(audit_rows(event_type="inbox.message.discarded")) == 1


def test_a_draft_too_large_to_review_is_refused_and_nothing_is_stored(reviewed):
    response = reviewed.client.post(
        "/inbox/send", json={"to": ["a@example.com"], "subject": "Big", "text": "x" * 70_000}
    )
    assert response.status_code == 400, response.text
    assert response.json()["errors"]["text"]
    assert not Message.objects.filter(agent=reviewed.agent).exists()
    assert not Approval.objects.exists()


def test_the_summary_is_one_line_of_at_most_200_characters():
    assert review.review_summary("") == "Send email: (no subject)"
    assert review.review_summary("a\u2028b\x85c") == "Send email: a b c"
    long = review.review_summary("x" * 500)
    assert len(long) == 200 and long.endswith("…")


def test_drafts_a_crash_left_without_their_approval_are_linked_or_discarded_by_the_repair(reviewed, owner):  # noqa: F811
    """A process may die between storing a draft and linking its approval: the repair links the approval
    it opened (applying a decision made meanwhile) or, if none was opened, discards the draft."""
    decided, orphaned = draft(reviewed, subject="Decided meanwhile"), draft(reviewed, subject="Never asked")
    stale = timezone.now() - timedelta(seconds=review.REPAIR_AFTER_SECONDS + 1)
    Message.objects.filter(public_id__in=[decided["id"], orphaned["id"]]).update(
        approval_id=None, received_at=stale
    )
    # The person denied the first before its link was written: the decision found no draft to settle.
    approval_decide(
        approval_id=decided["approval_id"], workspace=reviewed.agent.workspace, user=owner, approve=False
    )
    assert Message.objects.get(public_id=decided["id"]).status == MessageStatus.AWAITING_APPROVAL
    # The second's approval was never opened.
    Approval.objects.filter(public_id=orphaned["approval_id"]).update(evidence={}, evidence_json="")

    assert review.reviews_repair() == 2
    first, second = (
        Message.objects.get(public_id=decided["id"]),
        Message.objects.get(public_id=orphaned["id"]),
    )
    assert (first.status, first.approval_id) == (MessageStatus.DISCARDED, decided["approval_id"])
    assert (second.status, second.last_error) == (MessageStatus.DISCARDED, "approval_not_created")
    assert review.reviews_repair() == 0
