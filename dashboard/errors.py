"""The pages people see when the dashboard refuses them: a role that may not do something (403) and a form
whose CSRF check failed. Both are cards in the dashboard's style that say what happened, who can change it
and where to go back to, instead of Django's bare defaults."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from accounts.models import Membership
from accounts.roles import Permission, role_may
from accounts.selectors import workspace_members
from accounts.team import role_with_article


class RoleLacksPermission(PermissionDenied):
    """A member's role does not grant what the page needs; the 403 page names both and who can grant it."""

    def __init__(self, membership: Membership, needs: Permission) -> None:
        super().__init__(f"{role_with_article(membership.role)} may not do this here.")
        self.membership = membership
        self.needs = needs


def _sentence_case(label: str) -> str:
    return label[:1].lower() + label[1:]


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    membership: Membership | None = getattr(exception, "membership", None) or getattr(
        request, "membership", None
    )
    context: dict[str, Any] = {
        "back_url": "/",
        "back_label": "Go to the dashboard",
        # A refusal raised by a page itself carries a sentence for people (accounts.team's rules).
        "detail": "" if isinstance(exception, RoleLacksPermission) else str(exception or ""),
    }
    if membership is not None:
        workspace = membership.workspace
        needs = getattr(exception, "needs", None)
        # Roles are the owners' to hand out (accounts.roles: only they manage the team).
        grantors = [
            member.user
            for member in workspace_members(workspace)
            if member.user.is_active and role_may(member.role, Permission.MANAGE_TEAM)
        ]
        context.update(
            refused_in=workspace,
            your_role=role_with_article(membership.role),
            refused=_sentence_case(needs.label) if isinstance(needs, Permission) else "",
            grantors=sorted(grantors, key=lambda user: user.email),
            back_url=reverse("dashboard:approvals", args=[workspace.slug]),
            back_label=f"Back to {workspace.name}",
        )
    return render(request, "dashboard/forbidden.html", context, status=403)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a form sent from a stale page (or without the cookie) is refused with a way back to
    the page it came from when that page is the dashboard's own."""
    referer = request.headers.get("Referer", "")
    ours = urlsplit(settings.DASHBOARD_BASE_URL)
    came_from = urlsplit(referer)
    back_url = "/"
    if referer and (came_from.scheme, came_from.netloc) == (ours.scheme, ours.netloc):
        back_url = came_from.path + (f"?{came_from.query}" if came_from.query else "")
    return render(request, "dashboard/csrf_failure.html", {"back_url": back_url}, status=403)
