"""The calendars list and a calendar's page: which days and hours its timeline shows (from the URL), the
reservations and busy time in them, and the links that move the view."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.http import QueryDict
from django.urls import reverse
from django.utils.http import urlencode

from agentcal.moments import known_zone_names, zone_label
from bookings.models import Calendar
from bookings.selectors import calendar_window
from bookings.spans import Span
from dashboard.timeline import (
    MAX_LANES,
    WORKING_HOURS,
    block_kind,
    build_timeline,
    calendar_zone,
    has_upstream_conflict,
    join_busy,
    midnight,
    visible_hours,
)
from dashboard.wording import setting_duration
from sync.selectors import calendars_with_links
from workspaces.models import Workspace

VIEWS = ("day", "week")
DEFAULT_VIEW = "week"
# The dates a timeline may open on: its window, a week either side for the arrows' links and a zone's
# offset from UTC must all stay within what Python's dates can hold (year 1 to 9999).
FIRST_DATE, LAST_DATE = date.min + timedelta(days=14), date.max - timedelta(days=14)


def calendar_rows(workspace: Workspace) -> list[dict[str, Any]]:
    """The calendars list: each calendar, its rules in words, and its link to an owner's calendar."""
    return [
        {
            "calendar": calendar,
            "hold_ttl": setting_duration(calendar.hold_ttl_seconds),
            "bump_window": setting_duration(calendar.bump_window_seconds),
            # A reverse one-to-one raises (an AttributeError) when there is no row: not linked.
            "connection": getattr(calendar, "upstream_connection", None),
        }
        for calendar in calendars_with_links(workspace)
    ]


def zone_abbreviations(window: Span, zone: ZoneInfo) -> str:
    # The window ends at the next midnight: the last visible day's zone is a moment before it.
    first = zone_label(window.start.astimezone(zone))
    last = zone_label((window.end - timedelta(seconds=1)).astimezone(zone))
    return first if first == last else f"{first}/{last}"


def timezone_names() -> list[str]:
    """The names a time zone field suggests (the field takes any IANA name the server knows)."""
    return sorted(known_zone_names())


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
        if not FIRST_DATE <= anchor <= LAST_DATE:
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


def calendar_page(
    *, workspace: Workspace, calendar: Calendar, params: QueryDict, now: datetime
) -> dict[str, Any]:
    """What the calendar page shows at `now` (the database's clock, which decides whether a hold has
    lapsed, as it does for the engine), for its URL's `params`."""
    zone = calendar_zone(calendar)
    today = now.astimezone(zone).date()
    query = TimelineQuery.parse(params, today=today)
    days = query.days
    window = Span(midnight(days[0], zone), midnight(days[-1] + timedelta(days=1), zone))
    found = calendar_window(calendar=calendar, window=window, with_ended=query.show_ended)
    reservations = found.reservations
    kinds = {r.pk: block_kind(r, now) for r in reservations}
    shown = [r for r in reservations if query.show_ended or kinds[r.pk][0] != "ended"]
    # Ended reservations are left out by default (a day of released holds buried the live ones); the
    # toggle says how many there are.
    ended_count = sum(1 for r in reservations if kinds[r.pk][0] == "ended") + found.ended_left_out
    busy = join_busy(found.busy_blocks)
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
    return {
        "calendar": calendar,
        "zone_name": str(zone),
        # The grid keeps the calendar's own zone, named on it; a week that spans a DST change names both.
        "zone_abbreviations": zone_abbreviations(window, zone),
        "query": query,
        "view": query.view,
        "range_label": range_label(days),
        "timeline": timeline,
        "working_hours": f"{WORKING_HOURS[0]:02d}–{WORKING_HOURS[1]:02d}",
        "hold_ttl": setting_duration(calendar.hold_ttl_seconds),
        "bump_window": setting_duration(calendar.bump_window_seconds),
        "rows": [
            {
                "reservation": r,
                "kind": kinds[r.pk][0],
                "label": kinds[r.pk][1],
                "upstream_conflict": has_upstream_conflict(r),
            }
            for r in shown
        ],
        "busy_count": len(busy),
        "live_count": sum(1 for r in shown if kinds[r.pk][0] != "ended"),
        "ended_count": ended_count,
        "self_url": link(),
        "prev_url": link(anchor=query.anchor - query.step),
        "next_url": link(anchor=query.anchor + query.step),
        "today_url": link(anchor=today),
        "day_url": link(view="day"),
        "week_url": link(view="week"),
        "working_hours_url": link(full_day=False),
        "full_day_url": link(full_day=True),
        "ended_toggle_url": link(show_ended=not query.show_ended),
        "drawer_url_template": reverse(
            "dashboard:calendar_reservation", args=[workspace.slug, calendar.public_id, "__id__"]
        ),
        "is_current": today in days,
        # A phone opens a calendar whose URL names no view on one day (a week is wider than its screen).
        "view_chosen": "view" in params,
        "now": now,
    }


def range_label(days: list[date]) -> str:
    first, last = days[0], days[-1]
    if first == last:
        return first.strftime("%A, %-d %B %Y")
    if first.year != last.year:
        return f"{first.strftime('%-d %b %Y')} – {last.strftime('%-d %b %Y')}"
    if first.month != last.month:
        return f"{first.strftime('%-d %b')} – {last.strftime('%-d %b %Y')}"
    return f"{first.day} – {last.strftime('%-d %b %Y')}"
