"""A review-first email draft (inboxes.review) as the email approving would send, its HTML sanitized."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from accounts.models import Membership, Permission
from approvals.models import Approval
from dashboard.wording import attendee_text
from inboxes.html import sanitize_html
from inboxes.models import Message
from inboxes.selectors import draft_for_approval


@dataclass
class EmailDraft:
    """A review-first email (inboxes.review): the message approving sends."""

    to: list[str]
    cc: list[str]
    subject: str
    text: str
    html: SafeString  # sanitized; "" when the draft has no HTML part
    in_reply_to: str
    invite_booking_id: str
    message: Message | None  # the draft in the agent's inbox this approval releases; None: not linked
    from_address: str
    thread_url: str


def addresses(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, str) else attendee_text(v) for v in value]


def email_draft(approval: Approval, evidence: Any, membership: Membership) -> EmailDraft | None:
    """The email preview for evidence shaped like a review-first draft. Only the draft's own link to this
    approval (Message.approval_id) proves that approving sends it: evidence alone is what the agent wrote."""
    if approval.hold_id or not isinstance(evidence, dict):
        return None
    message_id = evidence.get("message")
    if not (isinstance(message_id, str) and isinstance(evidence.get("to"), list)):
        return None
    if not isinstance(evidence.get("subject"), str) or not ("text" in evidence or "html" in evidence):
        return None
    message = draft_for_approval(
        message_id=message_id, agent_id=approval.agent_id, approval_id=approval.public_id
    )
    sender = message.from_address if message is not None and isinstance(message.from_address, dict) else None
    thread_url = ""
    if message is not None and membership.may(Permission.READ_INBOXES):
        thread_url = reverse(
            "dashboard:agent_inbox_thread",
            args=[approval.workspace.slug, approval.agent.public_id, message.thread.public_id],
        )
    text, html = evidence.get("text"), evidence.get("html")
    invite = evidence.get("invite")
    invite_booking = invite.get("booking_id") if isinstance(invite, dict) else None
    in_reply_to = evidence.get("in_reply_to")
    return EmailDraft(
        to=addresses(evidence.get("to")),
        cc=addresses(evidence.get("cc")),
        subject=evidence["subject"],
        text=text if isinstance(text, str) else "",
        # Agent-written, and possibly quoting a stranger's mail: never shown as it came.
        html=mark_safe(sanitize_html(html)) if isinstance(html, str) else mark_safe(""),  # noqa: S308
        in_reply_to=in_reply_to if isinstance(in_reply_to, str) else "",
        invite_booking_id=invite_booking if isinstance(invite_booking, str) else "",
        message=message,
        from_address=attendee_text(sender) if sender else "",
        thread_url=thread_url,
    )
