"""A calendar's link to its owner's own calendar (upstream sync), on the calendar's page.

Everyone in the workspace sees whether a calendar is linked and how its sync is doing; only owners and
admins connect, sync now or disconnect (each through sync.services, which audits it). The app password
goes from the form to `connection_create` and nowhere else: it is never rendered back, not even into
the form a refused attempt is shown again with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentcal.errors import AgentCalError
from bookings.models import Calendar, UpstreamSource
from dashboard.access import workspace_page
from dashboard.http import DashboardRequest
from sync.models import Connection, ConnectionStatus, Provider, UpstreamEvent
from sync.services import connection_create, connection_delete, request_sync
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
    unreadable_count: int = 0
    unreadable: list[UpstreamEvent] = field(default_factory=list)

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
        can_manage=request.membership.can_manage,
        now=now,
        form=form or ConnectForm(),
    )
    if connection is not None:
        unreadable = UpstreamEvent.objects.filter(connection=connection, deleted_at=None).exclude(problem="")
        panel.unreadable_count = unreadable.count()
        if panel.unreadable_count:
            panel.unreadable = list(unreadable.order_by("-updated_at", "-id")[:UNREADABLE_LISTED])
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
@workspace_page(manage=True)
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
@workspace_page(manage=True)
def connection_sync_now(request: DashboardRequest, workspace: Workspace, connection_id: str) -> HttpResponse:
    connection = _connection(workspace, connection_id)
    request_sync(connection.pk)
    messages.success(request, "Sync requested. The status below changes when it has run.")
    return redirect("dashboard:calendar", workspace.slug, connection.calendar.public_id)


@require_POST
@workspace_page(manage=True)
def connection_disconnect(
    request: DashboardRequest, workspace: Workspace, connection_id: str
) -> HttpResponse:
    connection = _connection(workspace, connection_id)
    calendar = connection.calendar
    connection_delete(actor=request.actor, connection=connection)
    messages.success(
        request,
        f"{calendar.name} is no longer linked to {connection.url}; its events stopped blocking agents.",
    )
    return redirect("dashboard:calendar", workspace.slug, calendar.public_id)
