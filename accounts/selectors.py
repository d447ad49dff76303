"""Whose workspace is whose: the memberships people's pages are opened through, and a team's members and
open invitations."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max

from accounts.models import Invitation, MagicLink, Membership
from workspaces.models import Workspace


def membership_in(*, user_id: int, workspace_slug: str) -> Membership | None:
    """The person's membership of the workspace `workspace_slug`, with the workspace; None if not a member."""
    return (
        Membership.objects.select_related("workspace")
        .filter(user=user_id, workspace__slug=workspace_slug)
        .first()
    )


def first_membership(*, user_id: int | None) -> Membership | None:
    """The person's oldest membership, with its workspace."""
    return Membership.objects.select_related("workspace").filter(user=user_id).order_by("id").first()


def workspace_members(workspace: Workspace) -> list[Membership]:
    """Every membership of the workspace, with its person."""
    return list(Membership.objects.filter(workspace=workspace).select_related("user"))


def open_invitations(workspace: Workspace) -> list[Invitation]:
    """Invitations neither accepted nor revoked, newest first."""
    return list(
        Invitation.objects.filter(
            workspace=workspace, accepted_at__isnull=True, revoked_at__isnull=True
        ).order_by("-sent_at")
    )


def link_expiries(invitations: list[Invitation]) -> dict[int, datetime]:
    """Per invitation id: until when its newest unused sign-in link works (none left: left out)."""
    return {
        row["invitation_id"]: row["latest"]
        for row in MagicLink.objects.filter(invitation__in=invitations, used_at__isnull=True)
        .values("invitation_id")
        .annotate(latest=Max("expires_at"))
    }
