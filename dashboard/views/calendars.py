"""Calendars: a list with live counts, and a day/week timeline of one calendar in its own time zone.

The timeline shows the calendar's reservations and, when the calendar is linked to a person's own
calendar (sync), that calendar's busy time: it blocks agents like a frozen booking.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import Count, Q
from django.db.models.functions import Now
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from agentcal.clock import server_now
from bookings.models import (
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
from dashboard.views.connections import (
    ConnectForm,
    allow_oauth_forms,
    calendar_in,
    connection_panel,
    provider_name,
)
from workspaces.models import Workspace

TIMELINE_POLL_SECONDS = 5
VIEWS = ("day", "week")
DEFAULT_VIEW = "week"
MINUTES_PER_DAY = 24 * 60
# The timeline shows working hours, widened to take in every block (and the now line) in range.
FIRST_HOUR, LAST_HOUR = 7, 20
SHORT_BLOCK_MINUTES = 45


@workspace_page()
def calendar_list(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
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
    return render(
        request, "dashboard/calendars/list.html", page_context(request, "calendars", calendars=calendars)
    )


@dataclass
class Busy:
    """An interval of the owner's own calendar (one upstream event; its stored pieces joined)."""

    source: str
    start_time: datetime
    end_time: datetime

    @property
    def source_name(self) -> str:
        return provider_name(self.source)


@dataclass
class Block:
    """One reservation's (or one busy interval's) piece of one day column, in percent of the column."""

    reservation: Reservation | None
    busy: Busy | None
    kind: str  # css class: held | committed | frozen | ended | busy
    label: str  # status as people read it: held, committed, frozen, lapsed, bumped, ..., busy
    start_minute: float  # wall-clock minutes since the column's local midnight
    end_minute: float
    top: float = 0
    height: float = 0
    lane: int = 0
    lanes: int = 1
    starts_before: bool = False
    ends_after: bool = False

    @property
    def left(self) -> float:
        return 100 * self.lane / self.lanes

    @property
    def width(self) -> float:
        return 100 / self.lanes

    @property
    def upstream_conflict(self) -> bool:
        return self.reservation is not None and has_upstream_conflict(self.reservation)

    @property
    def is_short(self) -> bool:
        """Too short for more than its title (the rest shows on hover)."""
        return self.end_minute - self.start_minute < SHORT_BLOCK_MINUTES


@dataclass
class DayColumn:
    day: date
    is_today: bool
    blocks: list[Block] = field(default_factory=list)
    now_minute: float | None = None
    now_top: float | None = None


@dataclass
class Timeline:
    columns: list[DayColumn]
    first_hour: int
    last_hour: int  # exclusive

    @property
    def hours(self) -> list[dict[str, object]]:
        span = self.last_hour - self.first_hour
        return [
            {"label": f"{hour:02d}:00", "top": 100 * (hour - self.first_hour) / span}
            for hour in range(self.first_hour, self.last_hour)
        ]

    @property
    def hour_count(self) -> int:
        return self.last_hour - self.first_hour


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _midnight(day: date, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, time(), tzinfo=zone)


def _wall_minutes(moment: datetime, zone: ZoneInfo) -> float:
    local = moment.astimezone(zone)
    return local.hour * 60 + local.minute + local.second / 60


def block_kind(reservation: Reservation, now: datetime) -> tuple[str, str]:
    status = reservation.status
    if status == ReservationStatus.HELD:
        # A lapsed hold is still 'held' until a writer or the sweep expires it; it blocks nothing.
        return ("held", "held") if reservation.is_live_at(now) else ("ended", "lapsed")
    if status == ReservationStatus.COMMITTED:
        return ("frozen", "frozen") if reservation.is_frozen_at(now) else ("committed", "committed")
    return "ended", status


def has_upstream_conflict(reservation: Reservation) -> bool:
    """A booking kept although the owner's own calendar has an event over it (flagged by the sync)."""
    return reservation.upstream_conflict_at is not None and reservation.status == ReservationStatus.COMMITTED


def _assign_lanes(blocks: list[Block]) -> None:
    """Side by side where blocks overlap (an ended reservation under a live one, say)."""
    blocks.sort(key=lambda b: (b.start_minute, -b.end_minute))
    cluster: list[Block] = []
    lane_ends: list[float] = []
    cluster_end = -1.0
    for block in [*blocks, None]:
        if block is None or block.start_minute >= cluster_end:
            for member in cluster:
                member.lanes = len(lane_ends)
            if block is None:
                break
            cluster, lane_ends, cluster_end = [], [], -1.0
        free = next((i for i, end in enumerate(lane_ends) if end <= block.start_minute), None)
        if free is None:
            lane_ends.append(block.end_minute)
            block.lane = len(lane_ends) - 1
        else:
            lane_ends[free] = block.end_minute
            block.lane = free
        cluster.append(block)
        cluster_end = max(cluster_end, block.end_minute)


def join_busy(blocks: list[BusyBlock]) -> list[Busy]:
    """One interval per upstream event: an event longer than a reservation may be is stored in
    back-to-back pieces (so the engine's bounded overlap scan finds it), and shows as one block."""
    joined: dict[tuple[int, str], list[Busy]] = {}
    for block in sorted(blocks, key=lambda b: (b.connection_id, b.event_key, b.start_time)):
        pieces = joined.setdefault((block.connection_id, block.event_key), [])
        if pieces and pieces[-1].end_time == block.start_time:
            pieces[-1].end_time = block.end_time
        else:
            pieces.append(Busy(block.source, block.start_time, block.end_time))
    return sorted((busy for pieces in joined.values() for busy in pieces), key=lambda b: b.start_time)


def build_timeline(
    *,
    days: list[date],
    reservations: list[Reservation],
    zone: ZoneInfo,
    now: datetime,
    busy: Sequence[Busy] = (),
) -> Timeline:
    today = now.astimezone(zone).date()
    columns = []
    for day in days:
        day_start, day_end = _midnight(day, zone), _midnight(day + timedelta(days=1), zone)
        column = DayColumn(day=day, is_today=day == today)
        if column.is_today:
            column.now_minute = _wall_minutes(now, zone)
        items: list[tuple[Reservation | None, Busy | None, datetime, datetime]] = [
            *((r, None, r.start_time, r.end_time) for r in reservations),
            *((None, b, b.start_time, b.end_time) for b in busy),
        ]
        for reservation, interval, starts, ends in items:
            if not (starts < day_end and ends > day_start):
                continue
            kind, label = block_kind(reservation, now) if reservation is not None else ("busy", "busy")
            start = 0.0 if starts <= day_start else _wall_minutes(starts, zone)
            end = MINUTES_PER_DAY if ends >= day_end else _wall_minutes(ends, zone)
            end = max(end, start + 1)  # a DST fold can make the wall clock run backwards
            column.blocks.append(
                Block(
                    reservation=reservation,
                    busy=interval,
                    kind=kind,
                    label=label,
                    start_minute=start,
                    end_minute=end,
                    starts_before=starts < day_start,
                    ends_after=ends > day_end,
                )
            )
        _assign_lanes(column.blocks)
        columns.append(column)
    return _fit_window(columns)


def _fit_window(columns: list[DayColumn]) -> Timeline:
    """Place blocks in percent of the visible hours: working hours, widened to fit everything shown."""
    starts = [b.start_minute for c in columns for b in c.blocks]
    ends = [b.end_minute for c in columns for b in c.blocks]
    nows = [c.now_minute for c in columns if c.now_minute is not None]
    first = min([FIRST_HOUR, *(int(m // 60) for m in starts + nows)])
    last = max([LAST_HOUR, *(math.ceil(m / 60) for m in ends), *(int(m // 60) + 1 for m in nows)])
    origin, length = first * 60, (last - first) * 60
    for column in columns:
        if column.now_minute is not None:
            column.now_top = 100 * (column.now_minute - origin) / length
        for block in column.blocks:
            block.top = 100 * (block.start_minute - origin) / length
            block.height = 100 * (block.end_minute - block.start_minute) / length
    return Timeline(columns=columns, first_hour=first, last_hour=min(last, 24))


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


@workspace_page()
def calendar_view(request: DashboardRequest, workspace: Workspace, calendar_id: str) -> HttpResponse:
    """`?view=day|week&date=YYYY-MM-DD`; htmx polls the timeline partial (and, for a linked calendar,
    the upstream calendar panel) to stay live."""
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
    zone = _zone(calendar.timezone)
    # The database's clock decides whether a hold has lapsed, as it does for the engine.
    now = server_now()
    view = request.GET.get("view", DEFAULT_VIEW)
    if view not in VIEWS:
        view = DEFAULT_VIEW
    today = now.astimezone(zone).date()
    try:
        anchor = date.fromisoformat(request.GET.get("date", ""))
    except ValueError:
        anchor = today
    if view == "day":
        days, step = [anchor], timedelta(days=1)
    else:
        monday = anchor - timedelta(days=anchor.weekday())
        days, step = [monday + timedelta(days=n) for n in range(7)], timedelta(days=7)
    range_start, range_end = _midnight(days[0], zone), _midnight(days[-1] + timedelta(days=1), zone)
    reservations = list(
        Reservation.objects.filter(calendar=calendar, start_time__lt=range_end, end_time__gt=range_start)
        .select_related("agent")
        .order_by("start_time", "id")
    )
    # The bounded overlap filter: blocks are stored in pieces no longer than a reservation for it.
    busy = join_busy(
        list(BusyBlock.objects.filter(overlapping_q(Span(range_start, range_end)), calendar=calendar))
    )
    kinds = {r.pk: block_kind(r, now) for r in reservations}
    base_url = reverse("dashboard:calendar", args=[workspace.slug, calendar.public_id])

    def link(**params: str) -> str:
        return f"{base_url}?{urlencode({'view': view, 'date': anchor.isoformat(), **params})}"

    context = page_context(
        request,
        "calendars",
        calendar=calendar,
        zone_name=str(zone),
        view=view,
        days=days,
        range_label=_range_label(days),
        timeline=build_timeline(days=days, reservations=reservations, zone=zone, now=now, busy=busy),
        hold_ttl=_duration(calendar.hold_ttl_seconds),
        bump_window=_duration(calendar.bump_window_seconds),
        rows=[
            {
                "reservation": r,
                "kind": kinds[r.pk][0],
                "label": kinds[r.pk][1],
                "upstream_conflict": has_upstream_conflict(r),
            }
            for r in reservations
        ],
        busy_count=len(busy),
        live_count=sum(1 for kind, _ in kinds.values() if kind != "ended"),
        self_url=link(),
        prev_url=link(date=(anchor - step).isoformat()),
        next_url=link(date=(anchor + step).isoformat()),
        today_url=link(date=today.isoformat()),
        day_url=link(view="day"),
        week_url=link(view="week"),
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
