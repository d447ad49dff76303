"""Telling the workspace owners that an approval waits: one email each, linking to the dashboard queue."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import tzinfo

from django.conf import settings

from accounts.owner_mail import email_owners
from agentcal.moments import moment_text
from approvals.models import Approval

logger = logging.getLogger(__name__)


def approval_notify_owners(approval_pk: int) -> None:
    """After commit: email the workspace owner(s) a link to the approval in the dashboard queue.

    Never an approve/deny link or token: only a signed-in person decides. A mail failure is logged,
    never raised: the approval exists and the queue shows it whether or not the email went out.
    """
    try:
        approval = Approval.objects.select_related("workspace", "agent").get(pk=approval_pk)
        subject, body = _notification(approval)
    except Exception:
        logger.exception("could not prepare the notification for approval %s", approval_pk)
        return
    email_owners(approval.workspace, subject, body, about=f"approval {approval.public_id}")


def approval_queue_url(approval: Approval) -> str:
    return f"{settings.DASHBOARD_BASE_URL}/w/{approval.workspace.slug}/approvals/{approval.public_id}"


def _notification(approval: Approval) -> tuple[str, Callable[[tzinfo | None], str]]:
    agent, workspace = approval.agent, approval.workspace
    subject = f"[{workspace.name}] Approval requested by {agent.name}: {approval.summary}"

    def body(zone: tzinfo | None) -> str:
        return (
            f"{agent.name} asks for approval in {workspace.name}:\n\n"
            f"    {approval.summary}\n\n"
            f"Review it in the AgentCal dashboard (you will be asked to sign in):\n"
            f"{approval_queue_url(approval)}\n\n"
            f"If nobody decides, it expires on {moment_text(approval.expires_at, zone)}.\n"
        )

    return subject, body
