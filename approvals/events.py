"""An approval as seen from outside: its JSON (the API's answers, webhook payloads) and the outbox event
that announces each of its state changes, emitted inside the transaction that makes the change."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentcal.clock import isoformat_z
from approvals.models import Approval
from webhooks.models import EventType
from webhooks.outbox import outbox_emit


def approval_data(approval: Approval, *, now: datetime | None = None) -> dict[str, Any]:
    """The approval as its agent sees it (API and webhooks), JSON-ready. Evidence is left out: the agent
    sent it and can read it back with GET; webhooks need not carry up to 64 KiB of it on every event.
    `now` (the database's clock) reports an unswept expiry as `expired`."""
    status = approval.status_at(now) if now is not None else approval.status
    decided_at = approval.decided_at_as_of(now) if now is not None else approval.decided_at
    return {
        "id": approval.public_id,
        "status": status,
        "summary": approval.summary,
        "state": approval.state,
        "hold_id": approval.hold_id,
        "booking_id": approval.booking_id,
        "booking_error": approval.booking_error,
        "agent_id": approval.agent.public_id,
        "created_at": isoformat_z(approval.created_at),
        "expires_at": isoformat_z(approval.expires_at),
        "decided_by": approval.decided_by_email or None,
        "decided_at": isoformat_z(decided_at) if decided_at else None,
        "note": approval.note,
    }


def approval_announce(event_type: EventType, approval: Approval) -> None:
    """Emit `event_type` for the approval through the outbox, in the caller's transaction."""
    outbox_emit(
        event_type=event_type,
        workspace_id=approval.workspace_id,
        agent_id=approval.agent_id,
        data={"approval": approval_data(approval)},
    )
