"""A calendar's link to its owner's own calendar (upstream sync), on the calendar's page.

Everyone in the workspace sees whether a calendar is linked and how its sync is doing; only owners and
admins connect, sync now or disconnect (each through sync.services, which audits it). The app password
goes from the form to `connection_create` and nowhere else: it is never rendered back, not even into
the form a refused attempt is shown again with.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from datetime import datetime

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.models import Membership
from accounts.roles import Permission
from agentcal.errors import AgentCalError
from bookings.models import Calendar, UpstreamSource
from dashboard.access import workspace_page
from dashboard.http import DashboardRequest
from sync.models import Connection, ConnectionStatus, Provider, UpstreamEvent
from sync.oauth import OAuthApp, app_for, grant_from_secret, oauth_apps, pkce_pair, seal_grant
from sync.services import connection_create, connection_create_oauth, connection_delete, request_sync
from workspaces.models import Workspace

# How people name each provider ("CalDAV busy", "Microsoft 365").
PROVIDER_NAMES: dict[str, str] = {
    UpstreamSource.CALDAV: "CalDAV",
    UpstreamSource.GOOGLE: "Google",
    UpstreamSource.MICROSOFT: "Microsoft 365",
}
# Upstream events that could not be read, listed by name on the panel (the count is always shown).
UNREADABLE_LISTED = 5


def provider_name(provider: str) -> str:
    return PROVIDER_NAMES.get(provider, provider)


class ConnectForm(forms.Form):
    """Parsing only; whether the server takes these credentials is connection_create's to find out."""

    url = forms.URLField(max_length=2048, assume_scheme="https")
    username = forms.CharField(max_length=320)
    password = forms.CharField(max_length=1024, strip=False)


@dataclass
class ConnectionPanel:
    """What the calendar page's "Upstream calendar" panel shows."""

    calendar: Calendar
    connection: Connection | None
    can_manage: bool
    now: datetime  # the database's clock, as the rest of the page
    form: ConnectForm
    oauth_apps: list[OAuthApp] = field(default_factory=list)
    unreadable_count: int = 0
    unreadable: list[UpstreamEvent] = field(default_factory=list)
    # Series too costly to expand, each blocking its whole span.
    whole_span: list[UpstreamEvent] = field(default_factory=list)

    @property
    def provider_name(self) -> str:
        return provider_name(self.connection.provider) if self.connection else ""

    @property
    def is_failing(self) -> bool:
        return self.connection is not None and self.connection.status == ConnectionStatus.FAILING

    @property
    def next_sync(self) -> str:
        """ "due now", "in 40 s", "in 12 min", "in 1 h 5 min" (a failing link backs off up to an hour)."""
        if self.connection is None:
            return ""
        seconds = math.ceil((self.connection.next_sync_at - self.now).total_seconds())
        if seconds <= 0:
            return "due now"
        if seconds < 60:
            return f"in {seconds} s"
        minutes = math.ceil(seconds / 60)
        if minutes < 60:
            return f"in {minutes} min"
        return f"in {minutes // 60} h" + (f" {minutes % 60} min" if minutes % 60 else "")


def connection_panel(
    request: DashboardRequest, calendar: Calendar, *, now: datetime, form: ConnectForm | None = None
) -> ConnectionPanel:
    connection = Connection.objects.filter(calendar=calendar).select_related("created_by_agent").first()
    panel = ConnectionPanel(
        calendar=calendar,
        connection=connection,
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
        now=now,
        form=form or ConnectForm(),
        oauth_apps=oauth_apps(),
    )
    if connection is not None:
        unreadable = UpstreamEvent.objects.filter(connection=connection, deleted_at=None).exclude(problem="")
        panel.unreadable_count = unreadable.count()
        if panel.unreadable_count:
            panel.unreadable = list(unreadable.order_by("-updated_at", "-id")[:UNREADABLE_LISTED])
        panel.whole_span = list(
            UpstreamEvent.objects.filter(connection=connection, deleted_at=None)
            .exclude(warning="")
            .order_by("-updated_at", "-id")[:UNREADABLE_LISTED]
        )
    return panel


def calendar_in(workspace: Workspace, calendar_id: str) -> Calendar:
    calendar = Calendar.objects.filter(workspace=workspace, public_id=calendar_id).first()
    if calendar is None:
        raise Http404("No such calendar")
    return calendar


def _connection(workspace: Workspace, connection_id: str) -> Connection:
    connection = (
        Connection.objects.filter(workspace=workspace, public_id=connection_id)
        .select_related("calendar")
        .first()
    )
    if connection is None:
        raise Http404("No such connection")
    return connection


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_connect(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    # The calendar page's module renders this panel, so it is imported here, where it is needed.
    from dashboard.views.calendars import render_calendar

    calendar = calendar_in(workspace, calendar_id)
    form = ConnectForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            connection = connection_create(
                actor=request.actor,
                calendar=calendar,
                provider=Provider.CALDAV,
                url=data["url"],
                username=data["username"],
                password=data["password"],
            )
        except AgentCalError as exc:
            # Every refusal (wrong password, not a calendar, unreachable, a private address, already
            # linked) says what to fix; nothing was stored.
            form.add_error(None, exc.detail)
        else:
            messages.success(
                request,
                f"{calendar.name} is linked to {connection.url}. The first sync is on its way; "
                "from then on the events there block agents here.",
            )
            return redirect("dashboard:calendar", workspace.slug, calendar.public_id)
    return render_calendar(request, workspace, calendar, connect_form=form, status=400)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_sync_now(request: DashboardRequest, workspace: Workspace, connection_id: str) -> HttpResponse:
    connection = _connection(workspace, connection_id)
    request_sync(connection.pk)
    messages.success(request, "Sync requested. The status below changes when it has run.")
    return redirect("dashboard:calendar", workspace.slug, connection.calendar.public_id)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_disconnect(
    request: DashboardRequest, workspace: Workspace, connection_id: str
) -> HttpResponse:
    connection = _connection(workspace, connection_id)
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


def allow_oauth_forms(response: HttpResponse) -> HttpResponse:
    """The calendar page's "Connect Google Calendar" form posts here and is redirected to the provider's
    consent page; the policy's `form-action 'self'` would stop that redirect, so this page's policy also
    names the configured providers' authorization origins (and nothing else)."""
    origins = [app.authorization_origin() for app in oauth_apps()]
    policy = settings.CONTENT_SECURITY_POLICY
    if origins and "form-action 'self'" in policy:
        response.headers["Content-Security-Policy"] = policy.replace(
            "form-action 'self'", "form-action 'self' " + " ".join(sorted(set(origins)))
        )
    return response


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
    membership = (
        Membership.objects.select_related("workspace")
        .filter(user=request.user.pk, workspace__slug=started["workspace"])
        .first()
    )
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
