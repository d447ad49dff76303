"""The front door, and a new workspace's getting-started guide.

`/` takes owners and admins of a workspace that is not set up yet to the guide, everyone else to the
approvals queue. The guide is a checklist that ticks itself from real data (an agent, a live key, a
reservation); hiding it is a per-browser preference (a cookie).

Design: docs/architecture.md, "The dashboard".
"""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_POST

from accounts.roles import Permission
from accounts.selectors import first_membership
from agentcal.clock import isoformat_z, server_now
from bookings.models import Calendar
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from dashboard.links import guide_reservation_url
from dashboard.one_time import Reveal, keep_for_display, see_other, take_for_display
from dashboard.viewmodels.setup_guide import Setup
from workspaces.models import Scope, Workspace
from workspaces.selectors import active_agent
from workspaces.services import AgentSlugTaken, agent_create, api_key_issue

HIDDEN_COOKIE = "agentcal_guide_hidden"
HIDDEN_COOKIE_MAX_AGE = 365 * 86400
# What the guide's key may do: exactly what its curl script needs, and reading back what it made.
GUIDE_SCOPES = [Scope.CALENDARS_READ, Scope.CALENDARS_WRITE, Scope.BOOKINGS_READ, Scope.BOOKINGS_WRITE]
GUIDE_KEY_NAME = "Getting started"
POLL_SECONDS = 3


@login_required
def home(request: HttpRequest) -> HttpResponse:
    membership = first_membership(user_id=request.user.pk)
    if membership is None:
        return render(request, "dashboard/no_workspace.html")
    workspace = membership.workspace
    if (
        membership.may(Permission.MANAGE_WORKSPACE)
        and not guide_hidden(request, workspace)
        and not Setup.of(workspace).complete
    ):
        return redirect("dashboard:start", workspace.slug)
    return redirect("dashboard:approvals", workspace.slug)


def guide_hidden(request: HttpRequest, workspace: Workspace) -> bool:
    return workspace.public_id in request.COOKIES.get(HIDDEN_COOKIE, "").split(".")


# --- What is set up already ---------------------------------------------------------------------------------


def booking_script(*, api_base: str, raw_key: str, calendar: Calendar | None, now: datetime) -> str:
    """A POSIX shell script that books a first slot with the key: creates a calendar unless the workspace
    has one, then holds and commits half an hour tomorrow at 10:00 UTC in one atomic step."""
    start = datetime.combine((now + timedelta(days=1)).date(), datetime.min.time(), tzinfo=UTC)
    start += timedelta(hours=10)
    end = start + timedelta(minutes=30)
    # JSON may break lines between fields, and so may a single-quoted shell word: short lines for phones.
    times = json.dumps({"start_time": isoformat_z(start), "end_time": isoformat_z(end)})[1:-1]
    key_line = f"AGENTCAL_KEY={shlex.quote(raw_key)}" if raw_key else "AGENTCAL_KEY='paste your key here'"
    headers = ['  -H "Authorization: Bearer $AGENTCAL_KEY" \\', '  -H "Content-Type: application/json" \\']
    lines = [key_line, f"AGENTCAL={shlex.quote(api_base)}", ""]
    if calendar is None:
        lines += [
            "# A calendar to book on (its id, cal_…, is the answer's first field)",
            'CALENDAR=$(curl -sS "$AGENTCAL/calendars" \\',
            *headers,
            """  -d '{"name": "First calendar"}' \\""",
            """  | sed -n 's/^{ *"id": *"\\([^"]*\\)".*/\\1/p')""",
        ]
    else:
        lines += [f"CALENDAR={shlex.quote(calendar.public_id)}  # {calendar.name}"]
    lines += [
        "",
        "# Hold and commit half an hour tomorrow, in one atomic step",
        'curl -sS "$AGENTCAL/calendars/$CALENDAR/commits" \\',
        *headers,
        f"  -d '{{{times},",
        """      "title": "First booking"}'""",
    ]
    return "\n".join(lines)


# --- The guide ----------------------------------------------------------------------------------------------


class GuideAgentForm(forms.Form):
    name = forms.CharField(max_length=200, strip=True)


def _guide_key_slot(workspace: Workspace) -> str:
    return f"guide-key:{workspace.public_id}"


def _render_start(
    request: DashboardRequest,
    workspace: Workspace,
    *,
    reveal: Reveal | None = None,
    agent_form: GuideAgentForm | None = None,
    status: int = 200,
) -> HttpResponse:
    setup = Setup.of(workspace)
    reveal = reveal or Reveal()
    reservation = setup.reservation
    context = page_context(
        request,
        "start",
        page_url=reverse("dashboard:start", args=[workspace.slug]),
        setup=setup,
        reveal=reveal,
        agent_form=agent_form or GuideAgentForm(),
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
        hidden=guide_hidden(request, workspace),
        script=booking_script(
            api_base=settings.DASHBOARD_BASE_URL + "/v1",
            raw_key=reveal.secret,
            calendar=setup.calendar,
            now=server_now(),
        ),
        guide_scopes=[str(scope) for scope in GUIDE_SCOPES],
        poll_seconds=POLL_SECONDS,
        reservation_url=guide_reservation_url(workspace, reservation) if reservation is not None else "",
    )
    template = "dashboard/home/start.html"
    if request.htmx:
        template += "#guide-booking"  # the poll: the booking step and the progress, nothing else
    response = render(request, template, context, status=status)
    if reveal.secret:
        add_never_cache_headers(response)  # it carries a raw key
    return response


@require_GET
@workspace_page()
def start(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    # The poll never takes the key out of the session: only the full page shows it.
    reveal = None if request.htmx else take_for_display(request, _guide_key_slot(workspace))
    return _render_start(request, workspace, reveal=reveal)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def start_agent(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    form = GuideAgentForm(request.POST)
    if form.is_valid():
        try:
            agent = agent_create(actor=request.actor, name=form.cleaned_data["name"])
        except AgentSlugTaken:  # a race for the derived slug: rare enough to ask again
            form.add_error("name", "Another agent was just created with this name; try again.")
        else:
            messages.success(request, f"Agent {agent.name} created. Next, its key.")
            return _to_step(workspace, "step-key")
    return _render_start(request, workspace, agent_form=form, status=400)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def start_key(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    agent = active_agent(workspace, request.POST.get("agent", ""))
    if agent is None:
        messages.error(request, "Choose one of the workspace's active agents.")
        return _to_step(workspace, "step-key")
    _, raw = api_key_issue(actor=request.actor, agent=agent, scopes=list(GUIDE_SCOPES), name=GUIDE_KEY_NAME)
    keep_for_display(request, _guide_key_slot(workspace), raw, agent=agent.name)
    return _to_step(workspace, "step-booking")


@require_POST
@workspace_page()
def start_hide(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Hide the guide in this browser (anyone may: it is their own view) and go on to the approvals."""
    response = see_other("dashboard:approvals", workspace.slug)
    hidden = {name for name in request.COOKIES.get(HIDDEN_COOKIE, "").split(".") if name}
    response.set_cookie(
        HIDDEN_COOKIE,
        ".".join(sorted(hidden | {workspace.public_id})),
        max_age=HIDDEN_COOKIE_MAX_AGE,
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Lax",
    )
    return response


def _to_step(workspace: Workspace, anchor: str) -> HttpResponseRedirect:
    response = see_other("dashboard:start", workspace.slug)
    response["Location"] += f"#{anchor}"
    return response
