"""What people's pages read of approvals: the pending count, the queue, one approval."""

from __future__ import annotations

from django.db.models.functions import Now

from approvals.models import Approval
from workspaces.models import Workspace


def pending_count(workspace: Workspace) -> int:
    """Approvals waiting for a person (lapsed ones excluded even before the expiry sweep runs)."""
    return Approval.objects.filter(workspace=workspace, status="pending", expires_at__gt=Now()).count()


def approval_queue(workspace: Workspace, *, recent: int) -> tuple[list[Approval], list[Approval]]:
    """(pending, newest first; the `recent` newest of the rest, decided or lapsed), with their agents."""
    # The queue never shows evidence: leave up to 128 KiB per row in the database.
    approvals = Approval.objects.select_related("agent").defer("evidence", "evidence_json", "state")
    pending = list(
        approvals.filter(workspace=workspace, status="pending", expires_at__gt=Now()).order_by("-created_at")
    )
    decided = list(
        approvals.filter(workspace=workspace)
        .exclude(status="pending", expires_at__gt=Now())
        .order_by("-created_at")[:recent]
    )
    return pending, decided


def approval_in_workspace(workspace: Workspace, public_id: str) -> Approval | None:
    return (
        Approval.objects.select_related("agent", "workspace")
        .filter(workspace=workspace, public_id=public_id)
        .first()
    )
