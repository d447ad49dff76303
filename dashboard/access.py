"""Who may see which workspace page. Every workspace page goes through `workspace_page`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from accounts.models import Membership
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
        def wrapper(request: HttpRequest, workspace_slug: str, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = (
                Membership.objects.select_related("workspace")
                .filter(user=request.user.pk, workspace__slug=workspace_slug)
                .first()
            )
            if membership is None:
                raise Http404("No such workspace")
            if manage and not membership.can_manage:
                raise PermissionDenied("Only owners and admins can do this.")
            request.membership = membership  # type: ignore[attr-defined]
            request.workspace = membership.workspace  # type: ignore[attr-defined]
            request.actor = Actor(  # type: ignore[attr-defined]
                workspace=membership.workspace,
                agent=None,
                request_id=getattr(request, "request_id", ""),
                user_email=request.user.email,  # type: ignore[union-attr]
            )
            return view(request, membership.workspace, *args, **kwargs)

        return wrapper

    return decorate


def page_context(request: HttpRequest, section: str, **extra: Any) -> dict[str, Any]:
    """What base.html needs on every workspace page."""
    from approvals.selectors import pending_count

    workspace = request.workspace  # type: ignore[attr-defined]
    return {
        "workspace": workspace,
        "membership": request.membership,  # type: ignore[attr-defined]
        "section": section,
        "pending_count": pending_count(workspace),
        **extra,
    }
