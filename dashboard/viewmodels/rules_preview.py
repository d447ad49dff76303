"""The next seven days' open time of a calendar, from its saved rules, in its own time zone: what the
settings page shows under the rules editor (and what agents will be offered)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from zoneinfo import ZoneInfo

from bookings.models import Calendar
from bookings.rules import ONE_DAY, CalendarRules, first_instant_at, open_spans
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


def rules_preview(calendar: Calendar, *, now: datetime) -> RulesPreview:
    zone = ZoneInfo(calendar.timezone)
    today = now.astimezone(zone).date()
    days = [today + ONE_DAY * n for n in range(PREVIEW_DAYS)]
    # Local midnights, through first_instant_at so a day that starts in a DST gap still has a start.
    starts = [first_instant_at(day, 0, zone) for day in [*days, today + ONE_DAY * PREVIEW_DAYS]]
    rules = calendar.rules or CalendarRules()
    spans = open_spans(rules, calendar.timezone, Span(starts[0], starts[-1]))
    preview = [
        PreviewDay(day, day == today, _local_intervals(spans, starts[n], starts[n + 1], zone))
        for n, day in enumerate(days)
    ]
    in_week = calendar.working_hours is None and not any(
        day.isoformat() in (calendar.date_overrides or {}) for day in days
    )
    return RulesPreview(
        zone=calendar.timezone,
        days=preview,
        any_time=in_week,
        closed_all_week=not any(day.intervals for day in preview),
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
    """90 → "1 h 30 min", 2880 → "2 days": how the read-only page states a buffer or a notice."""
    if minutes == 0:
        return "none"
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}" if days else "", f"{hours} h" if hours else ""]
    parts.append(f"{mins} min" if mins else "")
    return " ".join(part for part in parts if part)
