"""Review first: a review-first agent's message is stored as a draft (`awaiting_approval`, no delivery) and
becomes an approval request whose evidence is the draft; it goes out only when a person approves it.

`review_request` links the approval to the draft under the approval's row lock, so a decision made
meanwhile is not lost; `review_ended` (connected to `approval_ended` in inboxes.apps) queues or discards
the draft by a conditional update from `awaiting_approval`, once, audited with the decision; and
`reviews_repair` mends drafts a crash left without their approval.

Design: docs/architecture.md, "Review first".
"""

from __future__ import annotations

import json
from datetime import timedelta
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from agentcal.errors import InvalidRequest
from approvals.models import SUMMARY_MAX_CHARS, Approval, ApprovalStatus
from approvals.services import EVIDENCE_MAX_BYTES, approval_request
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.delivery import enqueue_delivery
from inboxes.models import Message, MessageStatus
from workspaces.actor import Actor

SUMMARY_PREFIX = "Send email: "
# A draft still without its approval this long after it was stored was left by a process that died.
REPAIR_AFTER_SECONDS = 300
REPAIR_BATCH = 100


def review_summary(subject: str) -> str:
    """The approval's one-line summary: "Send email: <subject>", whitespace (any line break) collapsed."""
    summary = SUMMARY_PREFIX + (" ".join(subject.split()) or "(no subject)")
    if len(summary) > SUMMARY_MAX_CHARS:
        summary = summary[: SUMMARY_MAX_CHARS - 1] + "…"
    return summary


def review_evidence(message: Message) -> dict[str, Any]:
    """The draft as the person deciding sees it: exactly what would be sent."""
    evidence: dict[str, Any] = {
        "message": message.public_id,
        "to": [a["address"] for a in message.to],
        "cc": [a["address"] for a in message.cc],
        "subject": message.subject,
        "text": message.text,
        "in_reply_to": message.in_reply_to or None,
    }
    if message.html:
        evidence["html"] = message.html
    if message.invite_booking_id:
        evidence["invite"] = {"booking_id": message.invite_booking_id, "event": message.calendar_event}
    return evidence


def review_check(message: Message) -> None:
    """Refuse a draft too large to show as an approval's evidence (checked before anything is stored)."""
    if len(json.dumps(review_evidence(message)).encode()) > EVIDENCE_MAX_BYTES:
        detail = (
            f"This agent's mail is reviewed before it is sent, and a draft for review may be at most "
            f"{EVIDENCE_MAX_BYTES // 1024} KiB (text and html together)."
        )
        raise InvalidRequest(detail, errors={"text": [detail]})


def review_request(*, message: Message, actor: Actor) -> Message:
    """Open the approval the stored draft waits for, and link it to the draft."""
    try:
        approval = approval_request(
            actor=actor, summary=review_summary(message.subject), evidence=review_evidence(message)
        )
    except Exception:
        # No approval, so nobody could ever release the draft: it is discarded, never sent.
        with transaction.atomic(durable=True):
            _discard(message, actor=actor, reason="approval_not_created", approval_id=None)
        raise
    with transaction.atomic(durable=True):
        _link(message, approval)
    return message


def review_if_asked(message: Message, actor: Actor) -> Message:
    """A message just stored: a draft awaiting approval has its approval opened (review_request)."""
    if message.status != MessageStatus.AWAITING_APPROVAL:
        return message
    return review_request(message=message, actor=actor)


def _link(message: Message, approval: Approval) -> None:
    # The approval's row lock orders this against a decision: one that comes later waits for the link
    # and then finds the draft; one that came first found no draft, and is applied here.
    status = Approval.objects.select_for_update().values_list("status", flat=True).get(pk=approval.pk)
    Message.objects.filter(pk=message.pk).update(approval_id=approval.public_id)
    message.approval_id = approval.public_id
    if status != ApprovalStatus.PENDING:
        approval.refresh_from_db()
        _settle(message, approval)
        message.refresh_from_db(fields=["status"])


def reviews_repair(*, limit: int = REPAIR_BATCH) -> int:
    """Drafts a process left between storing them and linking their approval (it died, or the database
    went away): link the approval if it was opened — settling it at once if it was decided meanwhile —
    otherwise discard the draft, which frees its share of the quotas. Returns how many it repaired."""
    stale = (
        Message.objects.filter(
            status=MessageStatus.AWAITING_APPROVAL,
            approval_id__isnull=True,
            received_at__lt=Now() - timedelta(seconds=REPAIR_AFTER_SECONDS),
        )
        .select_related("agent__workspace", "thread")
        .order_by("received_at", "pk")[:limit]
    )
    repaired = 0
    for message in stale:
        approval = (
            Approval.objects.filter(agent=message.agent, hold_id=None, evidence__message=message.public_id)
            .select_related("workspace", "agent")
            .order_by("pk")
            .first()
        )
        with transaction.atomic(durable=True):
            if approval is not None:
                _link(message, approval)
            else:
                actor = Actor(workspace=message.agent.workspace, agent=message.agent)
                _discard(message, actor=actor, reason="approval_not_created", approval_id=None)
        repaired += 1
    return repaired


def review_ended(sender: Any, *, approval: Approval, **kwargs: Any) -> None:
    """Receiver of approvals.services.approval_ended: release or discard the draft the approval gates."""
    if approval.hold_id is not None or not isinstance(approval.evidence, dict):
        return  # an approval for a booking, or not ours
    message_public_id = approval.evidence.get("message")
    if not isinstance(message_public_id, str):
        return
    # The approval's id on the draft proves the pair: evidence alone is whatever the agent wrote.
    message = (
        Message.objects.filter(
            public_id=message_public_id, agent_id=approval.agent_id, approval_id=approval.public_id
        )
        .select_related("thread")
        .first()
    )
    if message is not None:
        _settle(message, approval)


def _settle(message: Message, approval: Approval) -> None:
    actor = Actor(workspace=approval.workspace, agent=approval.agent, user_email=approval.decided_by_email)
    if approval.status != ApprovalStatus.APPROVED:
        _discard(message, actor=actor, reason=f"approval_{approval.status}", approval_id=approval.public_id)
        return
    released = Message.objects.filter(pk=message.pk, status=MessageStatus.AWAITING_APPROVAL).update(
        status=MessageStatus.QUEUED, next_attempt_at=Now()
    )
    if released != 1:
        return  # settled already
    audit_record(
        event_type=AuditEvent.INBOX_MESSAGE_QUEUED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={
            "agent": approval.agent.public_id,
            "message": message.public_id,
            "approval_id": approval.public_id,
            "recipients": len(message.to) + len(message.cc),
        },
    )
    transaction.on_commit(partial(enqueue_delivery, message.pk))


def _discard(message: Message, *, actor: Actor, reason: str, approval_id: str | None) -> None:
    discarded = Message.objects.filter(pk=message.pk, status=MessageStatus.AWAITING_APPROVAL).update(
        status=MessageStatus.DISCARDED, last_error=reason
    )
    if discarded != 1:
        return
    # No message.failed: nothing failed to deliver. The agent hears of the decision as approval.denied,
    # approval.expired or approval.cancelled, and the message reads `discarded`.
    audit_record(
        event_type=AuditEvent.INBOX_MESSAGE_DISCARDED,
        outcome=Outcome.REJECTED,
        actor=actor,
        failure_reason=reason,
        details={"agent": actor.agent_public_id, "message": message.public_id, "approval_id": approval_id},
    )
