"""A calendar's link to its owner's own calendar (upstream sync), on the calendar's page: sync now,
disconnect, and linking through an OAuth provider's consent.

Everyone in the workspace sees whether a calendar is linked and how its sync is doing (the panel,
viewmodels.connection_panel); only owners and admins connect, sync now or disconnect (each through
sync.services, which audits it). A CalDAV link's form posts to views.calendars.connection_connect, which
answers a refusal with the calendar page; its app password goes to `connection_create` and nowhere else
(never rendered back, not even into the form a refused attempt is shown again with).
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.roles import Permission
from accounts.selectors import membership_in
from agentcal.errors import AgentCalError
from dashboard.access import workspace_page
from dashboard.http import DashboardRequest
from dashboard.lookups import calendar_in, connection_in
from dashboard.wording import provider_name
from sync.oauth import app_for, grant_from_secret, pkce_pair, seal_grant
from sync.services import connection_create_oauth, connection_delete, request_sync
from workspaces.models import Workspace


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_sync_now(request: DashboardRequest, workspace: Workspace, connection_id: str) -> HttpResponse:
    connection = connection_in(workspace, connection_id)
    request_sync(connection.pk)
    messages.success(request, "Sync requested. The status below changes when it has run.")
    return redirect("dashboard:calendar", workspace.slug, connection.calendar.public_id)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_disconnect(
    request: DashboardRequest, workspace: Workspace, connection_id: str
) -> HttpResponse:
    connection = connection_in(workspace, connection_id)
    calendar = connection.calendar
    remove_bookings = request.POST.get("remove_bookings") == "on"
    connection_delete(actor=request.actor, connection=connection, remove_bookings=remove_bookings)
    linked_to = connection.url or connection.remote_calendar_name
    messages.success(
        request,
        f"{calendar.name} is no longer linked to {linked_to}; its events stopped blocking agents."
        + (" The bookings AgentCal had written there were removed." if remove_bookings else ""),
    )
    return redirect("dashboard:calendar", workspace.slug, calendar.public_id)


# --- OAuth providers (Google Calendar): consent at the provider, then pick the calendar -------------------

# Consents started but not finished, per session (the state parameter is bound to the session: a
# callback carrying another session's state is refused).
_PENDING = "sync_oauth_pending"
_GRANTED = "sync_oauth_granted"
MAX_PENDING = 5


def oauth_redirect_uri(provider: str) -> str:
    return f"{settings.DASHBOARD_BASE_URL}{reverse('dashboard:oauth_callback', args=[provider])}"


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_oauth_start(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, provider: str
) -> HttpResponse:
    calendar = calendar_in(workspace, calendar_id)
    try:
        app = app_for(provider)
    except AgentCalError as exc:
        messages.error(request, exc.detail)
        return redirect("dashboard:calendar", workspace.slug, calendar.public_id)
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(32)
    pending = dict(list(request.session.get(_PENDING, {}).items())[-(MAX_PENDING - 1) :])
    pending[state] = {
        "workspace": workspace.slug,
        "calendar": calendar.public_id,
        "provider": provider,
        "verifier": verifier,
    }
    request.session[_PENDING] = pending
    return redirect(
        app.authorization_url(
            state=state, code_challenge=challenge, redirect_uri=oauth_redirect_uri(provider)
        )
    )


@login_required
def oauth_callback(request: DashboardRequest, provider: str) -> HttpResponse:
    """The provider sends the person back here with a code (or an error). Exchange it, list their
    calendars, and ask which one to link."""
    pending = request.session.get(_PENDING, {})
    started = pending.pop(request.GET.get("state", ""), None)
    request.session[_PENDING] = pending
    if started is None or started["provider"] != provider:
        return render(
            request,
            "dashboard/calendars/oauth_problem.html",
            {
                "problem": "This sign-in did not start here, or it was already used. "
                "Start again from the calendar."
            },
            status=400,
        )
    back = reverse("dashboard:calendar", args=[started["workspace"], started["calendar"]])
    membership = membership_in(user_id=request.user.pk, workspace_slug=started["workspace"])
    if membership is None or not membership.may(Permission.MANAGE_WORKSPACE):
        raise Http404("No such workspace")
    if "error" in request.GET:
        messages.error(
            request, f"{provider_name(provider)} did not grant access ({request.GET['error'][:80]})."
        )
        return redirect(back)
    app = app_for(provider)
    try:
        grant = app.exchange(
            code=request.GET.get("code", ""),
            code_verifier=started["verifier"],
            redirect_uri=oauth_redirect_uri(provider),
        )
        calendars = app.calendars(grant.access_token)
    except Exception as exc:  # the provider's own errors: shown, never a 500
        messages.error(request, f"{provider_name(provider)} refused the sign-in: {exc}")
        return redirect(back)
    granted_id = secrets.token_urlsafe(16)
    request.session[_GRANTED] = {
        granted_id: {
            **started,
            "grant": seal_grant(grant),
            "calendars": [
                {"id": c.id, "name": c.name, "primary": c.primary, "account": c.account} for c in calendars
            ],
        }
    }
    return render(
        request,
        "dashboard/calendars/oauth_pick.html",
        {
            "workspace": membership.workspace,
            "calendar": calendar_in(membership.workspace, started["calendar"]),
            "provider_label": app.label,
            "provider": provider,
            "granted_id": granted_id,
            "choices": calendars,
        },
    )


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_oauth_pick(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, provider: str
) -> HttpResponse:
    calendar = calendar_in(workspace, calendar_id)
    granted = request.session.get(_GRANTED, {}).pop(request.POST.get("granted", ""), None)
    request.session.modified = True
    if granted is None or (granted["workspace"], granted["calendar"]) != (workspace.slug, calendar.public_id):
        messages.error(request, "That consent has expired; connect again.")
        return redirect("dashboard:calendar", workspace.slug, calendar.public_id)
    chosen = next((c for c in granted["calendars"] if c["id"] == request.POST.get("remote_calendar")), None)
    if chosen is None:
        messages.error(request, "Pick one of the calendars offered.")
        return redirect("dashboard:calendar", workspace.slug, calendar.public_id)
    account = chosen["account"]
    try:
        connection_create_oauth(
            actor=request.actor,
            calendar=calendar,
            provider=provider,
            grant=grant_from_secret(granted["grant"]),
            remote_calendar_id=chosen["id"],
            remote_calendar_name=chosen["name"],
            account=account,
        )
    except AgentCalError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(
            request,
            f"{calendar.name} is linked to {chosen['name']} ({provider_name(provider)}). The first sync is "
            "on its way; from then on the events there block agents here.",
        )
    return redirect("dashboard:calendar", workspace.slug, calendar.public_id)
