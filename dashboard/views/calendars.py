"""Calendars: the list (and creating one), a calendar's settings, and its live day/week timeline in its own
time zone, where a click on a reservation opens a drawer with its details, its audit history and the
owner's actions.

The timeline opens on working hours and live reservations; "24 h" and "Ended" show the rest. When the
calendar is linked to a person's own calendar (sync), that calendar's busy time shows too: it blocks
agents like a frozen booking. Everyone in the workspace reads these pages; owners and admins create and
edit calendars, move an agent's booking and end its hold or booking, through the same services the agent
API uses (the person acting is in the audit row, and the agent gets its usual webhook).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.forms.models import model_to_dict
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounts.roles import Permission
from agentcal.clock import server_now
from agentcal.errors import AgentCalError, SlotConflict
from bookings.engine import (
    booking_cancel_by_person,
    booking_move,
    calendar_create,
    calendar_update,
    hold_release_by_person,
)
from bookings.models import Calendar, Reservation, ReservationStatus
from dashboard.access import page_context, workspace_page
from dashboard.forms import RULE_FIELDS, SETTING_LABELS, CalendarForm, ConnectForm, setting_fields
from dashboard.http import DashboardRequest
from dashboard.links import reservation_url
from dashboard.lookups import calendar_in, reservation_in
from dashboard.rules_form import RulesEditor
from dashboard.timeline import calendar_zone
from dashboard.viewmodels.booking_move import MoveForm, offered_spans, span_words
from dashboard.viewmodels.calendar_page import calendar_page, calendar_rows, timezone_names
from dashboard.viewmodels.connection_panel import connection_panel
from dashboard.viewmodels.reservation_drawer import reservation_drawer as drawer_context
from dashboard.viewmodels.rules_preview import minutes_label, rules_preview
from sync.models import Provider
from sync.oauth import oauth_apps
from sync.services import connection_create
from workspaces.models import Workspace

TIMELINE_POLL_SECONDS = 5


# --- The list, and creating a calendar ----------------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
def calendar_list(request: DashboardRequest, workspace_slug: str) -> HttpResponse:
    """GET lists the calendars; POST creates one (owners and admins)."""
    if request.method == "POST":
        return create_calendar(request, workspace_slug)
    return list_calendars(request, workspace_slug)


@workspace_page()
def list_calendars(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    return render_calendar_list(request, workspace)


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def create_calendar(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    form = CalendarForm(request.POST)
    settings = form.settings(partial=False)
    if settings is None:
        return render_calendar_list(request, workspace, form=form, status=400)
    calendar = calendar_create(actor=request.actor, **settings)
    messages.success(request, f"Calendar {calendar.name} created. Agents book it as {calendar.public_id}.")
    return redirect("dashboard:calendar", workspace.slug, calendar.public_id)


def render_calendar_list(
    request: DashboardRequest, workspace: Workspace, *, form: CalendarForm | None = None, status: int = 200
) -> HttpResponse:
    form = form or CalendarForm(initial={"timezone": "UTC"})
    context = page_context(
        request,
        "calendars",
        calendars=calendar_rows(workspace),
        form=form,
        setting_fields=setting_fields(form),
        timezones=timezone_names(),
        # A new calendar starts in the browser's own zone (app.js), until someone picks another.
        suggest_browser_zone=not form.is_bound,
    )
    return render(request, "dashboard/calendars/list.html", context, status=status)


# --- A calendar's settings ----------------------------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
def calendar_settings(request: DashboardRequest, workspace_slug: str, calendar_id: str) -> HttpResponse:
    """The calendar's name, time zone, booking rules and working hours. Everyone in the workspace reads
    them; owners and admins change them. Changes apply to later holds and bookings: a booking keeps the
    bump window it was given."""
    if request.method == "POST":
        return save_settings(request, workspace_slug, calendar_id)
    return show_settings(request, workspace_slug, calendar_id)


@workspace_page()
def show_settings(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    calendar = calendar_in(workspace, calendar_id)
    return render_settings(request, calendar, CalendarForm.of(calendar), RulesEditor.of(calendar))


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def save_settings(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    calendar = calendar_in(workspace, calendar_id)
    form = CalendarForm(request.POST)
    editor = RulesEditor.from_post(request.POST)
    if editor is not None and request.POST.get("edit"):
        # An add/remove button pressed without JavaScript: the same form back, one row more or less.
        editor.edit(request.POST["edit"])
        return render_settings(request, calendar, form, editor)
    rules = editor.rules_json() if editor is not None else None
    settings = form.settings(partial=True, rules=rules)
    if settings is None or (editor is not None and rules is None):
        return render_settings(request, calendar, form, editor or RulesEditor.of(calendar), status=400)
    changes = {name: value for name, value in settings.items() if getattr(calendar, name) != value}
    if not changes:
        messages.info(request, "Nothing changed.")
    else:
        calendar = calendar_update(actor=request.actor, calendar=calendar, changes=changes)
        messages.success(request, f"Saved: {', '.join(SETTING_LABELS[name] for name in changes)}.")
    if editor is not None:
        return redirect("dashboard:calendar_settings", workspace.slug, calendar.public_id)
    return redirect("dashboard:calendar", workspace.slug, calendar.public_id)


def render_settings(
    request: DashboardRequest,
    calendar: Calendar,
    form: CalendarForm,
    editor: RulesEditor,
    *,
    status: int = 200,
) -> HttpResponse:
    context = page_context(
        request,
        "calendars",
        calendar=calendar,
        form=form,
        editor=editor,
        setting_fields=setting_fields(form),
        rule_fields=setting_fields(form, RULE_FIELDS),
        timezones=timezone_names(),
        # A calendar nobody has set up yet: the page suggests the browser's own zone (rules.js).
        suggest_browser_zone=not form.is_bound and calendar.timezone == "UTC" and not calendar.has_rules,
        **preview_context(calendar),
    )
    return render(request, "dashboard/calendars/settings.html", context, status=status)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def settings_preview(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    """The open-time preview of the settings form as it stands (htmx, on each change): checked as Save
    checks it, nothing stored. While the form has a problem, the saved rules' preview, marked so."""
    calendar = calendar_in(workspace, calendar_id)
    editor = RulesEditor.from_post(request.POST)
    rules = editor.rules_json() if editor is not None else None
    unsaved = CalendarForm(request.POST).settings(partial=True, rules=rules) if rules is not None else None
    context = page_context(
        request,
        "calendars",
        calendar=calendar,
        form_invalid=unsaved is None,
        **preview_context(calendar, unsaved),
    )
    return render(request, "dashboard/calendars/_rules_preview.html", context)


def preview_context(calendar: Calendar, unsaved: dict[str, Any] | None = None) -> dict[str, Any]:
    """The preview, and the buffers and notice stated in words, from the saved settings or `unsaved`."""
    minutes = {**model_to_dict(calendar, fields=list(RULE_FIELDS)), **(unsaved or {})}
    return {
        "preview": rules_preview(calendar, now=server_now(), unsaved=unsaved),
        "buffer_before": minutes_label(minutes["buffer_before_minutes"]),
        "buffer_after": minutes_label(minutes["buffer_after_minutes"]),
        "min_notice": minutes_label(minutes["min_notice_minutes"]),
    }


# --- The timeline -------------------------------------------------------------------------------------------


@workspace_page()
def calendar_view(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    """htmx polls the timeline partial (and, for a linked calendar, the upstream calendar panel) to stay
    live, and reloads it at once when the drawer changed a reservation (`calendar-changed`)."""
    return render_calendar(request, workspace, calendar_in(workspace, calendar_id))


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def connection_connect(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    """Link the calendar to a CalDAV calendar. Here rather than with the other link actions
    (views.connections): a refused attempt answers with this page, its form bound and its error shown."""
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


def render_calendar(
    request: DashboardRequest,
    workspace: Workspace,
    calendar: Calendar,
    *,
    connect_form: ConnectForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The calendar page; also what a refused "Connect" answers with, its form bound and its error shown."""
    # The database's clock decides whether a hold has lapsed, as it does for the engine.
    now = server_now()
    page = calendar_page(workspace=workspace, calendar=calendar, params=request.GET, now=now)
    panel = connection_panel(
        calendar, can_manage=request.membership.may(Permission.MANAGE_WORKSPACE), now=now, form=connect_form
    )
    context = page_context(
        request,
        "calendars",
        page_url=reverse("dashboard:calendar", args=[workspace.slug, calendar.public_id]),
        **page,
        poll_seconds=TIMELINE_POLL_SECONDS,
        panel=panel,
    )
    template = "dashboard/calendars/calendar.html"
    if request.htmx:
        # Two things poll this page: the timeline, and the panel of a linked calendar (its sync status).
        panel_polled = request.htmx.target == "connection-panel"
        template = "dashboard/calendars/_connection.html" if panel_polled else template + "#timeline"
    return allow_oauth_forms(render(request, template, context, status=status))


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


# --- A reservation's drawer, and the owner's actions --------------------------------------------------------


@workspace_page()
def reservation_drawer(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, reservation_id: str
) -> HttpResponse:
    """The drawer (htmx) or, opened on its own, a page: details, audit history, actions. `?confirm=1`
    asks the owner to confirm the action before its form is shown."""
    calendar = calendar_in(workspace, calendar_id)
    reservation = reservation_in(calendar, reservation_id)
    return render_drawer(request, workspace, reservation, confirm=request.GET.get("confirm") == "1")


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def reservation_cancel(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, reservation_id: str
) -> HttpResponse:
    reservation = reservation_in(calendar_in(workspace, calendar_id), reservation_id)
    if reservation.booking_id is None:
        return refused(request, workspace, reservation, "This is a hold, not a booking: release it instead.")
    if reservation.status == ReservationStatus.CANCELLED:
        return refused(request, workspace, reservation, "This booking was already cancelled.")
    try:
        booking_cancel_by_person(actor=request.actor, booking_id=reservation.booking_id)
    except AgentCalError as exc:
        return refused(request, workspace, reservation, f"Not cancelled: {exc.detail}")
    return done(
        request, workspace, reservation, f"Booking cancelled. {reservation.agent.name} has been told."
    )


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def reservation_move(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, reservation_id: str
) -> HttpResponse:
    """Move a booking to the day and times the form gives in its calendar's zone, as the signed-in person;
    a refusal shows on the form (a taken time with the free ones nearest it) and changes nothing."""
    reservation = reservation_in(calendar_in(workspace, calendar_id), reservation_id)
    if reservation.booking_id is None:
        return refused(
            request, workspace, reservation, "This is a hold, not a booking: only a booking moves."
        )
    zone = calendar_zone(reservation.calendar)
    form = MoveForm(request.POST, zone=zone)
    if not form.is_valid():
        return render_drawer(
            request, workspace, reservation, move_form=form, status=200 if request.htmx else 422
        )
    span = form.cleaned_data["span"]
    try:
        booking_move(actor=request.actor, booking_id=reservation.booking_id, span=span)
    except AgentCalError as exc:
        offers = (
            offered_spans(exc.extra.get("alternatives", []), zone) if isinstance(exc, SlotConflict) else []
        )
        reservation.refresh_from_db()
        return render_drawer(
            request,
            workspace,
            reservation,
            move_form=form,
            move_error=f"Not moved: {exc.detail}",
            offers=offers,
            status=200 if request.htmx else exc.status,
        )
    reservation.refresh_from_db()  # the new day is where the page lands
    title = reservation.title or "the booking"
    notice = f"Moved {title} to {span_words(span, zone)} ({zone}). {reservation.agent.name} has been told."
    return done(request, workspace, reservation, notice)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def reservation_release(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, reservation_id: str
) -> HttpResponse:
    reservation = reservation_in(calendar_in(workspace, calendar_id), reservation_id)
    if reservation.status == ReservationStatus.RELEASED:
        return refused(request, workspace, reservation, "This hold was already released.")
    try:
        hold_release_by_person(actor=request.actor, hold_id=reservation.hold_id)
    except AgentCalError as exc:
        return refused(request, workspace, reservation, f"Not released: {exc.detail}")
    return done(request, workspace, reservation, f"Hold released. {reservation.agent.name} has been told.")


def done(
    request: DashboardRequest, workspace: Workspace, reservation: Reservation, notice: str
) -> HttpResponse:
    if not request.htmx:
        messages.success(request, notice)
        return redirect(reservation_url(workspace, reservation))
    reservation.refresh_from_db()
    response = render_drawer(request, workspace, reservation, notice=notice)
    response["HX-Trigger"] = "calendar-changed"  # the timeline reloads at once instead of at its next poll
    return response


def refused(
    request: DashboardRequest, workspace: Workspace, reservation: Reservation, error: str
) -> HttpResponse:
    # htmx swaps only 2xx answers into the drawer by default, and the refusal belongs there; a plain form
    # post (no JavaScript) gets the page with a 409.
    reservation.refresh_from_db()
    return render_drawer(request, workspace, reservation, error=error, status=200 if request.htmx else 409)


def render_drawer(
    request: DashboardRequest,
    workspace: Workspace,
    reservation: Reservation,
    *,
    confirm: bool = False,
    notice: str = "",
    error: str = "",
    move_form: MoveForm | None = None,
    move_error: str = "",
    offers: list[dict[str, str]] | None = None,
    status: int = 200,
) -> HttpResponse:
    drawer = drawer_context(
        workspace=workspace,
        reservation=reservation,
        now=server_now(),
        confirm=confirm,
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
        move_form=move_form,
    )
    context = page_context(
        request,
        "calendars",
        page_url=drawer["drawer_url"],
        **drawer,
        notice=notice,
        error=error,
        move_error=move_error,
        offers=offers or [],
    )
    template = "dashboard/calendars/reservation.html"
    if request.htmx:
        template = "dashboard/calendars/_drawer.html"
    return render(request, template, context, status=status)
