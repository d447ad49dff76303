"""Who may see which workspace page. Every workspace page goes through `workspace_page`, which asks the
permission table (accounts.roles) whether the member's role allows what the page needs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse

from accounts.roles import Permission
from accounts.selectors import membership_in
from approvals.selectors import pending_count
from dashboard.errors import RoleLacksPermission
from dashboard.http import DashboardRequest
from workspaces.actor import Actor

View = Callable[..., HttpResponse]


def workspace_page(*, needs: Permission = Permission.READ) -> Callable[[View], View]:
    """Resolve `workspace_slug` to the signed-in person's membership.

    Not a member → 404 (another workspace's existence is never revealed). A role without the permission
    the page `needs` → 403. Sets request.membership, request.workspace and request.actor (for audited
    actions), and passes `workspace` on to the view.
    """

    def decorate(view: View) -> View:
        @login_required
        @functools.wraps(view)
        def wrapper(
            request: DashboardRequest, workspace_slug: str, *args: Any, **kwargs: Any
        ) -> HttpResponse:
            # Typed as what it becomes: login_required has signed the person in, and the lines below
            # set the rest.
            membership = membership_in(user_id=request.user.pk, workspace_slug=workspace_slug)
            if membership is None:
                raise Http404("No such workspace")
            if not membership.may(needs):
                raise RoleLacksPermission(membership, needs)
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


def page_context(
    request: DashboardRequest, section: str, *, page_url: str | None = None, **extra: Any
) -> dict[str, Any]:
    """What base.html needs on every workspace page. `can` answers templates' permission questions:
    `{% if can.manage_workspace %}`, keyed by accounts.roles.Permission's values.

    `page_url` is the address of the page as a GET, for a page that also answers a POST to another
    address (a form sent back with its errors, a confirm step without JavaScript); by default the
    request's own path. base.html gives it to app.js, which puts it in the address bar in place of the
    POST's: a reload then opens the page again and never sends the form a second time.
    """
    workspace = request.workspace
    return {
        "page_url": page_url or request.path,
        "workspace": workspace,
        "membership": request.membership,
        "can": {permission.value: request.membership.may(permission) for permission in Permission},
        "section": section,
        "pending_count": pending_count(workspace),
        **extra,
    }
