"""The next seven days' open time of a calendar, in its own time zone, from its saved rules or from the
settings form's unsaved ones: what the settings page shows under the rules editor."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from bookings.models import Calendar
from bookings.rules import ONE_DAY, first_instant_at, open_spans, parse_rules
from bookings.spans import Span

PREVIEW_DAYS = 7


@dataclass(frozen=True)
class PreviewDay:
    day: date
    is_today: bool
    intervals: list[tuple[str, str]]  # ("09:00", "12:30"), local wall time; an end at midnight is "24:00"


@dataclass(frozen=True)
class RulesPreview:
    zone: str
    days: list[PreviewDay]
    any_time: bool  # no working hours and no override in the week: open whenever
    closed_all_week: bool
    unsaved: bool = False  # drawn from the form's changes, not yet saved


def rules_preview(
    calendar: Calendar, *, now: datetime, unsaved: dict[str, Any] | None = None
) -> RulesPreview:
    """From the saved rules, or with `unsaved` (the form's checked settings: `timezone`, `working_hours`,
    `date_overrides`, each as the API takes it) in their place."""
    changes = unsaved or {}
    zone_name = changes.get("timezone", calendar.timezone)
    working_hours = changes.get("working_hours", calendar.working_hours)
    date_overrides = changes.get("date_overrides", calendar.date_overrides) or {}
    zone = ZoneInfo(zone_name)
    today = now.astimezone(zone).date()
    days = [today + ONE_DAY * n for n in range(PREVIEW_DAYS)]
    # Local midnights, through first_instant_at so a day that starts in a DST gap still has a start.
    starts = [first_instant_at(day, 0, zone) for day in [*days, today + ONE_DAY * PREVIEW_DAYS]]
    rules = parse_rules(working_hours=working_hours, date_overrides=date_overrides)
    spans = open_spans(rules, zone_name, Span(starts[0], starts[-1]))
    preview = [
        PreviewDay(day, day == today, _local_intervals(spans, starts[n], starts[n + 1], zone))
        for n, day in enumerate(days)
    ]
    return RulesPreview(
        zone=zone_name,
        days=preview,
        any_time=working_hours is None and not any(day.isoformat() in date_overrides for day in days),
        closed_all_week=not any(day.intervals for day in preview),
        unsaved=unsaved is not None,
    )


def _local_intervals(
    spans: list[Span], day_start: datetime, day_end: datetime, zone: ZoneInfo
) -> list[tuple[str, str]]:
    """The parts of `spans` on one local day, as wall-clock times (a span across midnight is cut there)."""
    intervals = []
    for span in spans:
        start, end = max(span.start, day_start), min(span.end, day_end)
        if start < end:
            closes = "24:00" if end == day_end else end.astimezone(zone).strftime("%H:%M")
            intervals.append((start.astimezone(zone).strftime("%H:%M"), closes))
    return intervals


def minutes_label(minutes: int) -> str:
    """90 → "1 h 30 min", 2880 → "2 days": how the page states a buffer or a notice in words."""
    if minutes == 0:
        return "none"
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    # No-break spaces: "2 h" never splits across lines.
    parts = [f"{days}\u00a0day{'s' if days != 1 else ''}" if days else "", f"{hours}\u00a0h" if hours else ""]
    parts.append(f"{mins}\u00a0min" if mins else "")
    return " ".join(part for part in parts if part)
