"""Calendars: the list (and creating one), a calendar's settings, and its live day/week timeline in its own
time zone, where a click on a reservation opens a drawer with its details, its audit history and the
owner's actions.

The timeline opens on working hours and live reservations; "24 h" and "Ended" show the rest. When the
calendar is linked to a person's own calendar (sync), that calendar's busy time shows too: it blocks
agents like a frozen booking. Everyone in the workspace reads these pages; owners and admins create and
edit calendars and end an agent's hold or booking, through the same services the agent API uses (the
person acting is in the audit row, and the agent gets its usual webhook).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django import forms
from django.contrib import messages
from django.db import models
from django.db.models import Count, Q
from django.db.models.functions import Now
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST
from rest_framework import serializers

from accounts.roles import Permission
from agentcal.clock import server_now
from agentcal.errors import AgentCalError
from audit.events import AuditEvent
from audit.models import Outcome
from audit.selectors import audit_records
from bookings.api import CalendarInput
from bookings.engine import booking_cancel_by_person, calendar_create, calendar_update, hold_release_by_person
from bookings.models import (
    LIVE_STATUSES,
    BusyBlock,
    Calendar,
    Reservation,
    ReservationStatus,
    live_hold_q,
    overlapping_q,
)
from bookings.spans import Span
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from dashboard.views.calendar_layout import (
    MAX_LANES,
    WORKING_HOURS,
    block_kind,
    build_timeline,
    has_upstream_conflict,
    join_busy,
    midnight,
    visible_hours,
)
from dashboard.views.connections import (
    ConnectForm,
    allow_oauth_forms,
    calendar_in,
    connection_panel,
)
from workspaces.models import Agent, Workspace

TIMELINE_POLL_SECONDS = 5
VIEWS = ("day", "week")
DEFAULT_VIEW = "week"
# A reservation's audit history in its drawer: the most recent rows (a heartbeating hold writes one per
# extension; the audit trail has them all).
HISTORY_LIMIT = 50


# --- The list, and creating a calendar ----------------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
def calendar_list(request: DashboardRequest, workspace_slug: str) -> HttpResponse:
    """GET lists the calendars; POST creates one (owners and admins)."""
    if request.method == "POST":
        return _calendar_create(request, workspace_slug)
    return _calendar_list(request, workspace_slug)


@workspace_page()
def _calendar_list(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    return _render_calendar_list(request, workspace)


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _calendar_create(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    form = CalendarForm(request.POST)
    settings = form.settings(partial=False)
    if settings is None:
        return _render_calendar_list(request, workspace, form=form, status=400)
    calendar = calendar_create(actor=request.actor, **settings)
    messages.success(request, f"Calendar {calendar.name} created. Agents book it as {calendar.public_id}.")
    return redirect("dashboard:calendar", workspace.slug, calendar.public_id)


def _render_calendar_list(
    request: DashboardRequest, workspace: Workspace, *, form: CalendarForm | None = None, status: int = 200
) -> HttpResponse:
    form = form or CalendarForm(initial={"timezone": "UTC"})
    live_hold = live_hold_q(prefix="reservations__")
    upcoming = Q(reservations__status=ReservationStatus.COMMITTED, reservations__end_time__gt=Now())
    calendars = [
        {
            "calendar": calendar,
            "hold_ttl": _duration(calendar.hold_ttl_seconds),
            "bump_window": _duration(calendar.bump_window_seconds),
            # A reverse one-to-one raises (an AttributeError) when there is no row: not linked.
            "connection": getattr(calendar, "upstream_connection", None),
        }
        for calendar in Calendar.objects.filter(workspace=workspace)
        .select_related("upstream_connection")
        .annotate(
            live_holds=Count("reservations", filter=live_hold),
            upcoming=Count("reservations", filter=upcoming),
        )
        .order_by("name", "id")
    ]
    context = page_context(
        request,
        "calendars",
        calendars=calendars,
        form=form,
        setting_fields=setting_fields(form),
        timezones=_timezones(),
    )
    return render(request, "dashboard/calendars/list.html", context, status=status)


# --- A calendar's settings ----------------------------------------------------------------------------------


class CalendarForm(forms.Form):
    """Parsing only (text to numbers). The rules (bounds, time zones) are the agent API's CalendarInput,
    applied by settings(), so a calendar cannot be set up in the dashboard in a way the API refuses."""

    name = forms.CharField(max_length=200, strip=True)
    timezone = forms.CharField(max_length=64, strip=True)
    slot_minutes = forms.IntegerField(required=False)
    hold_ttl_seconds = forms.IntegerField(required=False)
    bump_window_seconds = forms.IntegerField(required=False)
    max_booking_minutes = forms.IntegerField(required=False)

    @classmethod
    def of(cls, calendar: Calendar) -> CalendarForm:
        return cls(initial={name: getattr(calendar, name) for name in ("name", "timezone", *_SETTING_FIELDS)})

    def settings(self, *, partial: bool) -> dict[str, Any] | None:
        """The settings, checked by the API's rules; None (with the errors on the form) if any is refused.
        A blank number means the default when creating, and "unchanged" when editing (`partial`)."""
        if not self.is_valid():
            return None
        data = {name: value for name, value in self.cleaned_data.items() if value is not None}
        rules = CalendarInput(data=data, partial=partial)
        if not rules.is_valid():
            for name, problems in rules.errors.items():
                for problem in problems:
                    self.add_error(name if name in self.fields else None, str(problem))
            return None
        return dict(rules.validated_data)


@require_http_methods(["GET", "HEAD", "POST"])
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def calendar_settings(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    """The calendar's name, time zone and booking rules (owners and admins). Changes apply to later
    holds and bookings: a booking keeps the bump window it was given."""
    calendar = calendar_in(workspace, calendar_id)
    if request.method != "POST":
        return _render_settings(request, calendar, CalendarForm.of(calendar))
    form = CalendarForm(request.POST)
    settings = form.settings(partial=True)
    if settings is None:
        return _render_settings(request, calendar, form, status=400)
    changes = {name: value for name, value in settings.items() if getattr(calendar, name) != value}
    if not changes:
        messages.info(request, "Nothing changed.")
    else:
        calendar = calendar_update(actor=request.actor, calendar=calendar, changes=changes)
        messages.success(request, f"Saved: {', '.join(_SETTING_LABELS[name] for name in changes)}.")
    return redirect("dashboard:calendar", workspace.slug, calendar.public_id)


# How the settings form names each number, in what unit, and what it does (its bounds are CalendarInput's).
_SETTING_FIELDS = {
    "slot_minutes": ("Slot length", "minutes", "The grid agents are offered free slots on."),
    "hold_ttl_seconds": ("Hold lifetime", "seconds", "How long a hold lasts unless its agent extends it."),
    "bump_window_seconds": (
        "Bump window",
        "seconds",
        "How long a new booking may still be taken over by a higher priority; 0: never.",
    ),
    "max_booking_minutes": ("Longest booking", "minutes", "The longest hold or booking agents may make."),
}


def setting_fields(form: CalendarForm) -> list[tuple[Any, str, str, Any, Any, Any, str]]:
    """(bound field, label, unit, lowest, highest, default, what it does) per number, for
    _calendar_fields.html."""
    rules = CalendarInput().fields
    fields = []
    for name, (label, unit, hint) in _SETTING_FIELDS.items():
        bounds = rules[name]
        assert isinstance(bounds, serializers.IntegerField)
        model_field = Calendar._meta.get_field(name)
        assert isinstance(model_field, models.Field)
        default = model_field.default
        fields.append((form[name], label, unit, bounds.min_value, bounds.max_value, default, hint))
    return fields


_SETTING_LABELS = {
    "name": "name",
    "timezone": "time zone",
    "slot_minutes": "slot length",
    "hold_ttl_seconds": "hold lifetime",
    "bump_window_seconds": "bump window",
    "max_booking_minutes": "longest booking",
}


def _render_settings(
    request: DashboardRequest, calendar: Calendar, form: CalendarForm, *, status: int = 200
) -> HttpResponse:
    context = page_context(
        request,
        "calendars",
        calendar=calendar,
        form=form,
        setting_fields=setting_fields(form),
        timezones=_timezones(),
    )
    return render(request, "dashboard/calendars/settings.html", context, status=status)


def _timezones() -> list[str]:
    """The names a time zone field suggests (the field takes any IANA name the server knows)."""
    return sorted(available_timezones())


# --- The timeline -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineQuery:
    """What the calendar page shows, from its URL: `?view=day|week&date=YYYY-MM-DD&hours=24&ended=1`.
    Anything unreadable falls back to the default (this week, working hours, live reservations)."""

    view: str
    anchor: date
    full_day: bool
    show_ended: bool

    @classmethod
    def parse(cls, query: QueryDict, *, today: date) -> TimelineQuery:
        view = query.get("view", DEFAULT_VIEW)
        try:
            anchor = date.fromisoformat(query.get("date", ""))
        except ValueError:
            anchor = today
        return cls(
            view=view if view in VIEWS else DEFAULT_VIEW,
            anchor=anchor,
            full_day=query.get("hours") == "24",
            show_ended=query.get("ended") == "1",
        )

    @property
    def days(self) -> list[date]:
        if self.view == "day":
            return [self.anchor]
        monday = self.anchor - timedelta(days=self.anchor.weekday())
        return [monday + timedelta(days=n) for n in range(7)]

    @property
    def step(self) -> timedelta:
        return timedelta(days=1 if self.view == "day" else 7)

    def params(self, **changes: Any) -> dict[str, str]:
        """The query string of this page with `changes` (view, anchor, full_day, show_ended)."""
        view = changes.get("view", self.view)
        anchor = changes.get("anchor", self.anchor)
        params = {"view": view, "date": anchor.isoformat()}
        if changes.get("full_day", self.full_day):
            params["hours"] = "24"
        if changes.get("show_ended", self.show_ended):
            params["ended"] = "1"
        return params


@workspace_page()
def calendar_view(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    """htmx polls the timeline partial (and, for a linked calendar, the upstream calendar panel) to stay
    live, and reloads it at once when the drawer changed a reservation (`calendar-changed`)."""
    return render_calendar(request, workspace, calendar_in(workspace, calendar_id))


def render_calendar(
    request: DashboardRequest,
    workspace: Workspace,
    calendar: Calendar,
    *,
    connect_form: ConnectForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The calendar page; also what a refused "Connect" answers with, its form bound and its error shown."""
    zone = calendar_zone(calendar)
    # The database's clock decides whether a hold has lapsed, as it does for the engine.
    now = server_now()
    today = now.astimezone(zone).date()
    query = TimelineQuery.parse(request.GET, today=today)
    days = query.days
    window = Span(midnight(days[0], zone), midnight(days[-1] + timedelta(days=1), zone))
    in_range = Reservation.objects.filter(overlapping_q(window), calendar=calendar)
    candidates = in_range if query.show_ended else in_range.filter(status__in=LIVE_STATUSES)
    reservations = list(candidates.select_related("agent").order_by("start_time", "id"))
    kinds = {r.pk: block_kind(r, now) for r in reservations}
    shown = [r for r in reservations if query.show_ended or kinds[r.pk][0] != "ended"]
    # Ended reservations are left out by default (a day of released holds buried the live ones); the
    # toggle says how many there are.
    ended_count = sum(1 for r in reservations if kinds[r.pk][0] == "ended")
    if not query.show_ended:
        ended_count += in_range.exclude(status__in=LIVE_STATUSES).count()
    # The bounded overlap filter: blocks are stored in pieces no longer than a reservation for it.
    busy = join_busy(list(BusyBlock.objects.filter(overlapping_q(window), calendar=calendar)))
    timeline = build_timeline(
        days=days,
        reservations=shown,
        zone=zone,
        now=now,
        busy=busy,
        hours=visible_hours(full_day=query.full_day),
        max_lanes=MAX_LANES[query.view],
    )
    base_url = reverse("dashboard:calendar", args=[workspace.slug, calendar.public_id])

    def link(**changes: Any) -> str:
        return f"{base_url}?{urlencode(query.params(**changes))}"

    for column in timeline.columns:
        column.url = link(view="day", anchor=column.day)
    context = page_context(
        request,
        "calendars",
        calendar=calendar,
        zone_name=str(zone),
        query=query,
        view=query.view,
        range_label=_range_label(days),
        timeline=timeline,
        working_hours=f"{WORKING_HOURS[0]:02d}–{WORKING_HOURS[1]:02d}",
        hold_ttl=_duration(calendar.hold_ttl_seconds),
        bump_window=_duration(calendar.bump_window_seconds),
        rows=[
            {
                "reservation": r,
                "kind": kinds[r.pk][0],
                "label": kinds[r.pk][1],
                "upstream_conflict": has_upstream_conflict(r),
            }
            for r in shown
        ],
        busy_count=len(busy),
        live_count=sum(1 for r in shown if kinds[r.pk][0] != "ended"),
        ended_count=ended_count,
        self_url=link(),
        prev_url=link(anchor=query.anchor - query.step),
        next_url=link(anchor=query.anchor + query.step),
        today_url=link(anchor=today),
        day_url=link(view="day"),
        week_url=link(view="week"),
        working_hours_url=link(full_day=False),
        full_day_url=link(full_day=True),
        ended_toggle_url=link(show_ended=not query.show_ended),
        drawer_url_template=reverse(
            "dashboard:calendar_reservation", args=[workspace.slug, calendar.public_id, "__id__"]
        ),
        is_current=today in days,
        poll_seconds=TIMELINE_POLL_SECONDS,
        now=now,
        panel=connection_panel(request, calendar, now=now, form=connect_form),
    )
    template = "dashboard/calendars/calendar.html"
    if request.htmx:
        # Two things poll this page: the timeline, and the panel of a linked calendar (its sync status).
        panel_polled = request.htmx.target == "connection-panel"
        template = "dashboard/calendars/_connection.html" if panel_polled else template + "#timeline"
    return allow_oauth_forms(render(request, template, context, status=status))


def calendar_zone(calendar: Calendar) -> ZoneInfo:
    try:
        return ZoneInfo(calendar.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def reservation_url(workspace: Workspace, reservation: Reservation) -> str:
    """The stable link to one hold or booking from other pages (an approval): its calendar's day view on
    its day (all 24 hours when it falls outside working hours), its drawer open (app.js opens `#<id>`;
    a hold's id still finds the booking it became)."""
    return f"{_day_url(workspace, reservation)}#{reservation.hold_id}"


def _day_url(workspace: Workspace, reservation: Reservation) -> str:
    calendar = reservation.calendar
    zone = calendar_zone(calendar)
    starts, ends = reservation.start_time.astimezone(zone), reservation.end_time.astimezone(zone)
    day = starts.date()
    first, last = WORKING_HOURS
    outside = starts.hour < first or ends.date() > day or ends.hour * 60 + ends.minute > last * 60
    params = {"view": "day", "date": day.isoformat(), **({"hours": "24"} if outside else {})}
    base = reverse("dashboard:calendar", args=[workspace.slug, calendar.public_id])
    return f"{base}?{urlencode(params)}"


def hold_url(workspace: Workspace, hold_id: str) -> str | None:
    """reservation_url() of a hold (or the booking it became) by its id; None if there is none here."""
    reservation = (
        Reservation.objects.select_related("calendar")
        .filter(hold_id=hold_id, is_primary=True, calendar__workspace=workspace)
        .first()
    )
    return None if reservation is None else reservation_url(workspace, reservation)


# --- A reservation's drawer, and the owner's actions --------------------------------------------------------


def _reservation(calendar: Calendar, reservation_id: str) -> Reservation:
    """The calendar's share of a hold or booking, by either id (a hold's id finds the booking it became)."""
    reservation = (
        Reservation.objects.select_related("agent", "calendar")
        .filter(Q(hold_id=reservation_id) | Q(booking_id=reservation_id), calendar=calendar)
        .first()
    )
    if reservation is None:
        raise Http404("No such hold or booking on this calendar")
    return reservation


@workspace_page()
def reservation_drawer(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, reservation_id: str
) -> HttpResponse:
    """The drawer (htmx) or, opened on its own, a page: details, audit history, actions. `?confirm=1`
    asks the owner to confirm the action before its form is shown."""
    calendar = calendar_in(workspace, calendar_id)
    reservation = _reservation(calendar, reservation_id)
    return _render_drawer(request, workspace, reservation, confirm=request.GET.get("confirm") == "1")


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def reservation_cancel(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, reservation_id: str
) -> HttpResponse:
    reservation = _reservation(calendar_in(workspace, calendar_id), reservation_id)
    if reservation.booking_id is None:
        return _refused(request, workspace, reservation, "This is a hold, not a booking: release it instead.")
    if reservation.status == ReservationStatus.CANCELLED:
        return _refused(request, workspace, reservation, "This booking was already cancelled.")
    try:
        booking_cancel_by_person(actor=request.actor, booking_id=reservation.booking_id)
    except AgentCalError as exc:
        return _refused(request, workspace, reservation, f"Not cancelled: {exc.detail}")
    return _done(
        request, workspace, reservation, f"Booking cancelled. {reservation.agent.name} has been told."
    )


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def reservation_release(
    request: DashboardRequest, workspace: Workspace, calendar_id: str, reservation_id: str
) -> HttpResponse:
    reservation = _reservation(calendar_in(workspace, calendar_id), reservation_id)
    if reservation.status == ReservationStatus.RELEASED:
        return _refused(request, workspace, reservation, "This hold was already released.")
    try:
        hold_release_by_person(actor=request.actor, hold_id=reservation.hold_id)
    except AgentCalError as exc:
        return _refused(request, workspace, reservation, f"Not released: {exc.detail}")
    return _done(request, workspace, reservation, f"Hold released. {reservation.agent.name} has been told.")


def _done(
    request: DashboardRequest, workspace: Workspace, reservation: Reservation, notice: str
) -> HttpResponse:
    if not request.htmx:
        messages.success(request, notice)
        return redirect(reservation_url(workspace, reservation))
    reservation.refresh_from_db()
    response = _render_drawer(request, workspace, reservation, notice=notice)
    response["HX-Trigger"] = "calendar-changed"  # the timeline reloads at once instead of at its next poll
    return response


def _refused(
    request: DashboardRequest, workspace: Workspace, reservation: Reservation, error: str
) -> HttpResponse:
    # htmx swaps only 2xx answers into the drawer by default, and the refusal belongs there; a plain form
    # post (no JavaScript) gets the page with a 409.
    reservation.refresh_from_db()
    return _render_drawer(request, workspace, reservation, error=error, status=200 if request.htmx else 409)


def _render_drawer(
    request: DashboardRequest,
    workspace: Workspace,
    reservation: Reservation,
    *,
    confirm: bool = False,
    notice: str = "",
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    calendar = reservation.calendar
    now = server_now()
    kind, label = block_kind(reservation, now)
    action = _action(reservation, kind)
    public_id = reservation.booking_id or reservation.hold_id
    context = page_context(
        request,
        "calendars",
        calendar=calendar,
        r=reservation,
        public_id=public_id,
        kind=kind,
        label=label,
        zone_name=str(calendar_zone(calendar)),
        now=now,
        is_bumpable=reservation.is_bumpable_at(now) and reservation.status == ReservationStatus.COMMITTED,
        upstream_conflict=has_upstream_conflict(reservation),
        attendees=_attendees(reservation.attendees),
        also_on=list(
            Reservation.objects.filter(hold_id=reservation.hold_id)
            .exclude(pk=reservation.pk)
            .select_related("calendar")
            .order_by("calendar__name")
        ),
        displaced_by=Reservation.objects.filter(pk=reservation.displaced_by_id).first()
        if reservation.displaced_by_id
        else None,
        history=reservation_history(workspace, reservation),
        action=action,
        confirm=confirm and action is not None and request.membership.may(Permission.MANAGE_WORKSPACE),
        notice=notice,
        error=error,
        drawer_url=reverse(
            "dashboard:calendar_reservation", args=[workspace.slug, calendar.public_id, public_id]
        ),
        action_url=reverse(
            f"dashboard:calendar_reservation_{action}", args=[workspace.slug, calendar.public_id, public_id]
        )
        if action
        else "",
        calendar_url=_day_url(workspace, reservation),
    )
    template = "dashboard/calendars/reservation.html"
    if request.htmx:
        template = "dashboard/calendars/_drawer.html"
    return render(request, template, context, status=status)


def _action(reservation: Reservation, kind: str) -> str | None:
    """What an owner may do to it: cancel a booking, release a live hold no approval gates (its approval
    decides it), or nothing (it has ended)."""
    if reservation.status == ReservationStatus.COMMITTED:
        return "cancel"
    if kind == "held" and not reservation.awaiting_approval:
        return "release"
    return None


def _attendees(raw: Any) -> list[dict[str, str]]:
    """The agent's attendee list as people read it. It is the agent's free-form JSON: entries that are
    not {"email", "name", "response"} objects show as their text."""
    if not isinstance(raw, list):
        return []
    people = []
    for entry in raw:
        if isinstance(entry, dict):
            people.append(
                {
                    "email": str(entry.get("email") or ""),
                    "name": str(entry.get("name") or ""),
                    # Set from the attendee's reply to the booking's invite (inboxes.invites).
                    "response": str(entry.get("response") or ""),
                }
            )
        else:
            people.append({"email": "", "name": str(entry), "response": ""})
    return people


# What each audited step in a reservation's life reads as in its drawer (others show their event type).
HISTORY_LABELS: dict[str, str] = {
    AuditEvent.HOLD_CREATED: "Hold placed",
    AuditEvent.HOLD_EXTENDED: "Hold extended",
    AuditEvent.HOLD_EXTEND_REJECTED: "Extension refused",
    AuditEvent.HOLD_RELEASED: "Hold released",
    AuditEvent.HOLD_RELEASE_REJECTED: "Release refused",
    AuditEvent.HOLD_EXPIRED: "Hold expired",
    AuditEvent.HOLD_EVICTED: "Taken over by a higher priority",
    AuditEvent.COMMIT_CREATED: "Booked",
    AuditEvent.COMMIT_REJECTED: "Commit refused",
    AuditEvent.BOOKING_BUMPED: "Bumped by a higher priority",
    AuditEvent.BOOKING_CANCELLED: "Booking cancelled",
    AuditEvent.BOOKING_CANCEL_REJECTED: "Cancel refused",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT: "Owner's own calendar overlaps it",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT_RESOLVED: "Overlap with the owner's calendar cleared",
    AuditEvent.BOOKING_ATTENDEE_RESPONDED: "Attendee answered",
    AuditEvent.BOOKING_ATTENDEE_RESPONSE_REJECTED: "Attendee answer not applied",
    AuditEvent.INBOX_INVITE_CANCELLED: "Cancellation sent to attendees",
    AuditEvent.INBOX_INVITE_CANCELLED_BY_ORGANIZER: "Organizer cancelled the invite",
    AuditEvent.APPROVAL_REQUESTED: "Approval requested",
    AuditEvent.APPROVAL_APPROVED: "Approved",
    AuditEvent.APPROVAL_DENIED: "Denied",
    AuditEvent.APPROVAL_SETTLED: "Approval settled",
    AuditEvent.APPROVAL_EXPIRED: "Approval expired",
    AuditEvent.APPROVAL_CANCELLED: "Approval cancelled",
}


def reservation_history(workspace: Workspace, reservation: Reservation) -> list[dict[str, Any]]:
    """The audit rows of this hold and the booking it became, oldest first: what happened and who did it
    (a person by email, an agent by name, else AgentCal itself: the expiry sweep, say)."""
    ids = [reservation.hold_id, *([reservation.booking_id] if reservation.booking_id else [])]
    # Nothing about a reservation is audited before it exists: bounding the time lets the timestamp index
    # do the work (there is no index by reservation id). The minute covers the clocks of a write's
    # transaction, which starts before its row's created_at.
    records = list(
        audit_records(workspace=workspace, since=reservation.created_at - timedelta(minutes=1))
        .filter(reservation_public_id__in=ids)
        .order_by("-timestamp", "-id")[:HISTORY_LIMIT]
    )
    records.reverse()
    agent_names = dict(
        Agent.objects.filter(
            workspace=workspace, public_id__in={r.agent_public_id for r in records if r.agent_public_id}
        ).values_list("public_id", "name")
    )
    return [
        {
            "record": record,
            "label": HISTORY_LABELS.get(record.event_type, record.event_type),
            "who": record.actor_user
            or agent_names.get(record.agent_public_id, record.agent_public_id)
            or "AgentCal",
            "rejected": record.outcome == Outcome.REJECTED,
        }
        for record in records
    ]


# --- Formatting ---------------------------------------------------------------------------------------------


def _duration(seconds: int) -> str:
    """30 s, 10 min, 1 h 30 min, 2 days."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    if seconds < 86400 or seconds % 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days = seconds // 86400
    return f"{days} day" + ("s" if days > 1 else "")


def _range_label(days: list[date]) -> str:
    first, last = days[0], days[-1]
    if first == last:
        return first.strftime("%A, %-d %B %Y")
    if first.year != last.year:
        return f"{first.strftime('%-d %b %Y')} – {last.strftime('%-d %b %Y')}"
    if first.month != last.month:
        return f"{first.strftime('%-d %b')} – {last.strftime('%-d %b %Y')}"
    return f"{first.day} – {last.strftime('%-d %b %Y')}"
