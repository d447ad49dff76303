"""What people's pages read of agents' mail."""

from __future__ import annotations

from inboxes.models import Message


def draft_for_approval(*, message_id: str, agent_id: int, approval_id: str) -> Message | None:
    """The agent's review-first draft `message_id` with its thread, if it is the one the approval
    `approval_id` releases (its own link, Message.approval_id, not what the agent wrote, proves that)."""
    return (
        Message.objects.filter(public_id=message_id, agent_id=agent_id, approval_id=approval_id)
        .select_related("thread")
        .first()
    )
