"""One approval's page: what the agent asks (evidence, or the email a review-first draft would send), what
approving would do (the gated booking), and the live state its htmx poll compares by key."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils.http import urlencode

from accounts.models import Membership
from approvals.models import NOTE_MAX_CHARS, Approval, ApprovalStatus
from dashboard.viewmodels.approval_queue import STATUS_EXPLAINED, status_label
from dashboard.viewmodels.email_draft import email_draft
from dashboard.viewmodels.evidence import evidence_tree, raw_json
from dashboard.viewmodels.gated_booking import GatedBooking, gated_booking
from workspaces.models import Workspace

# Why an approved hold did not become a booking (Approval.booking_error), in words.
BOOKING_ERRORS = {
    "hold_evicted": "the time slot had been taken over before the decision (by a higher-priority agent "
    "or an event in the owner's own calendar)",
    "hold_expired": "the hold had run out before the decision",
    "hold_released": "the hold had been released before the decision",
    "hold_already_committed": "the hold had already become a booking",
}


def booking_error_text(code: str) -> str:
    return BOOKING_ERRORS.get(code, code)


def decision_key(approval: Approval, now: datetime) -> str:
    return f"{approval.version}-{approval.status_at(now)}"


def is_settled(approval: Approval, now: datetime) -> bool:
    """Nothing more will change on this page: decided, and an approved hold's outcome recorded."""
    status = approval.status_at(now)
    if status == ApprovalStatus.PENDING:
        return False
    if status == ApprovalStatus.APPROVED and approval.hold_id:
        return bool(approval.booking_id or approval.booking_error)
    return True


def live_state(
    *, workspace: Workspace, approval: Approval, now: datetime, can_decide: bool, poll_seconds: int
) -> dict[str, Any]:
    """What the polled parts of the page need: the decision, the booking, and the poll itself (none once
    the page is settled)."""
    booking = gated_booking(approval, now)
    status = approval.status_at(now)
    decision, booking_key = decision_key(approval, now), booking.key if booking else "-"
    poll_url = ""
    if not is_settled(approval, now):
        base = reverse("dashboard:approval", args=[workspace.slug, approval.public_id])
        poll_url = f"{base}?{urlencode({'live': '1', 'decision': decision, 'booking': booking_key})}"
    return {
        "approval": approval,
        "status": status,
        "status_label": status_label(status),
        "status_explained": STATUS_EXPLAINED.get(status, ""),
        "decided_at": approval.decided_at_as_of(now),
        "booking": booking,
        "booking_error_text": booking_error_text(approval.booking_error),
        "booking_url": booking_url(approval, booking),
        "can_decide": can_decide,
        "poll_url": poll_url,
        "poll_seconds": poll_seconds,
        "decision_key": decision,
        "booking_key": booking_key,
        "note_max_chars": NOTE_MAX_CHARS,
    }


def booking_url(approval: Approval, booking: GatedBooking | None) -> str:
    """The calendar day of the booking an approval made, when it made one."""
    if booking is None or not approval.booking_id:
        return ""
    return booking.shares[0].url


def approval_subject(approval: Approval, membership: Membership) -> dict[str, Any]:
    """What the agent submitted: an email draft's preview, or the evidence as a tree; both as raw JSON."""
    evidence = approval.evidence_in_order
    draft = email_draft(approval, evidence, membership)
    return {
        "draft": draft,
        "evidence": evidence_tree(evidence) if draft is None else None,
        "evidence_raw": raw_json(evidence),
        "evidence_kept_in_order": bool(approval.evidence_json),
        "state_raw": raw_json(approval.state) if approval.state is not None else "",
    }


def bump_window_words(seconds: int) -> str:
    """A calendar's bump window in words: "30 seconds", "2 minutes", "1.5 hours"; "" for none."""
    if seconds <= 0:
        return ""
    if seconds % 3600 == 0 or seconds > 3600:
        amount, unit = f"{seconds / 3600:g}", "hour"
    elif seconds % 60 == 0:
        amount, unit = str(seconds // 60), "minute"
    else:
        amount, unit = str(seconds), "second"
    return f"{amount} {unit}" + ("" if amount == "1" else "s")
