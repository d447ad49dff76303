"""The workspace's guardrails: the emergency stop for every agent at once, the default limits its agents
inherit, and dismissing the notices of limits met.

Owners alone pause and resume the workspace (`Permission.PAUSE_AGENTS`); its confirm step is on the
agents page (`?confirm=pause`), and while it is paused every workspace page says so, with Resume for
owners. Owners and admins set the defaults and dismiss notices. Each change is audited by its service.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from accounts.roles import Permission
from agentcal.errors import InvalidRequest
from dashboard.access import page_context, workspace_page
from dashboard.forms import LimitsForm
from dashboard.http import DashboardRequest
from dashboard.lookups import agent_in
from dashboard.viewmodels.guardrails import workspace_limits_context
from dashboard.wording import holds_released
from guardrails.services import notices_dismiss, workspace_limits_update, workspace_pause, workspace_resume
from workspaces.models import Workspace


@require_http_methods(["GET", "HEAD", "POST"])
def pause(request: HttpRequest, workspace_slug: str) -> HttpResponse:
    """POST pauses every agent (owners), from the confirm step; GET leads to that step."""
    if request.method == "POST":
        return _pause(request, workspace_slug)
    return _to_pause_confirm(request, workspace_slug)


@workspace_page()
def _to_pause_confirm(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    return redirect(reverse("dashboard:agents", args=[workspace.slug]) + "?confirm=pause")


@workspace_page(needs=Permission.PAUSE_AGENTS)
def _pause(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    stopped = workspace_pause(actor=request.actor, release_holds=request.POST.get("release_holds") == "on")
    released = holds_released(stopped.released)
    if stopped.changed:
        messages.success(
            request,
            f"Every agent in {workspace.name} is paused: their writes are refused from now on; reads still "
            f"work.{released}",
        )
    else:
        messages.error(request, f"{workspace.name} was already paused.{released}")
    return redirect("dashboard:agents", workspace.slug)


@require_POST
@workspace_page(needs=Permission.PAUSE_AGENTS)
def resume(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Lift the workspace's pause; back to the page the banner was on."""
    if workspace_resume(actor=request.actor):
        messages.success(
            request,
            f"{workspace.name} is resumed: its agents' writes work again (except those paused one by one).",
        )
    else:
        messages.error(request, f"{workspace.name} was not paused.")
    return redirect(_back_to(request, workspace))


def _back_to(request: DashboardRequest, workspace: Workspace) -> str:
    """`next` when it is one of this workspace's pages, else the agents page."""
    back = request.POST.get("next", "")
    if back.startswith(f"/w/{workspace.slug}/") and url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return back
    return reverse("dashboard:agents", args=[workspace.slug])


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def notices_dismiss_view(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Dismiss one agent's notices (`agent`), or every notice of the workspace."""
    agent_id = request.POST.get("agent", "")
    agent = agent_in(workspace, agent_id) if agent_id else None
    dismissed = notices_dismiss(actor=request.actor, agent=agent)
    if dismissed:
        messages.success(request, f"Dismissed {dismissed} notice{pluralize(dismissed)}. They stay on record.")
    return redirect(_back_to(request, workspace))


@require_http_methods(["GET", "HEAD", "POST"])
def limit_defaults(request: HttpRequest, workspace_slug: str) -> HttpResponse:
    """GET shows the workspace's default limits for its agents; POST sets them (owners and admins)."""
    if request.method == "POST":
        return _limit_defaults_update(request, workspace_slug)
    return _limit_defaults(request, workspace_slug)


@workspace_page()
def _limit_defaults(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    return _render_defaults(request, workspace)


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _limit_defaults_update(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    form = LimitsForm(request.POST)
    limits = form.limits()
    if limits is not None:
        try:
            workspace_limits_update(actor=request.actor, limits=limits)
        except InvalidRequest as exc:
            form.refused(exc.extra.get("errors", {}))
        else:
            messages.success(
                request, "Default limits saved: agents without their own apply them from their next request."
            )
            return redirect("dashboard:limit_defaults", workspace.slug)
    return _render_defaults(request, workspace, form=form, status=400)


def _render_defaults(
    request: DashboardRequest, workspace: Workspace, *, form: LimitsForm | None = None, status: int = 200
) -> HttpResponse:
    context = page_context(
        request,
        "agents",
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
        **workspace_limits_context(workspace, form),
    )
    return render(request, "dashboard/settings/limits.html", context, status=status)
