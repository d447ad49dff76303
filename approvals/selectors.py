from __future__ import annotations

from django.db.models.functions import Now

from workspaces.models import Workspace


def pending_count(workspace: Workspace) -> int:
    """Approvals waiting for a person (lapsed ones excluded even before the expiry sweep runs)."""
    from approvals.models import Approval

    return Approval.objects.filter(workspace=workspace, status="pending", expires_at__gt=Now()).count()
