"""Who may see which workspace page. Every workspace page goes through `workspace_page`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse

from accounts.models import Membership
from dashboard.http import DashboardRequest
from workspaces.actor import Actor

View = Callable[..., HttpResponse]


def workspace_page(*, manage: bool = False) -> Callable[[View], View]:
    """Resolve `workspace_slug` to the signed-in person's membership.

    Not a member → 404 (another workspace's existence is never revealed). `manage=True` pages need
    the owner or admin role → 403 for members. Sets request.membership, request.workspace and
    request.actor (for audited actions), and passes `workspace` on to the view.
    """

    def decorate(view: View) -> View:
        @login_required
        @functools.wraps(view)
        def wrapper(
            request: DashboardRequest, workspace_slug: str, *args: Any, **kwargs: Any
        ) -> HttpResponse:
            # Typed as what it becomes: login_required has signed the person in, and the lines below
            # set the rest.
            membership = (
                Membership.objects.select_related("workspace")
                .filter(user=request.user.pk, workspace__slug=workspace_slug)
                .first()
            )
            if membership is None:
                raise Http404("No such workspace")
            if manage and not membership.can_manage:
                raise PermissionDenied("Only owners and admins can do this.")
            request.membership = membership
            request.workspace = membership.workspace
            request.actor = Actor(
                workspace=membership.workspace,
                agent=None,
                request_id=getattr(request, "request_id", ""),
                user_email=request.user.email,
            )
            return view(request, membership.workspace, *args, **kwargs)

        return wrapper

    return decorate


def page_context(request: DashboardRequest, section: str, **extra: Any) -> dict[str, Any]:
    """What base.html needs on every workspace page."""
    from approvals.selectors import pending_count

    workspace = request.workspace
    return {
        "workspace": workspace,
        "membership": request.membership,
        "section": section,
        "pending_count": pending_count(workspace),
        **extra,
    }
