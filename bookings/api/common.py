"""What the agent API's booking views share: finding calendars in the caller's workspace, If-Match
and ETags, windows and spans."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.request import Request

from agentcal.errors import InvalidRange, InvalidRequest, NotFound
from bookings import engine
from bookings.models import Calendar
from bookings.selectors import MAX_AVAILABILITY_WINDOW, calendar_in_workspace
from bookings.spans import Span
from workspaces.actor import Actor

MAX_ALSO_CALENDARS = 20


def calendar_for(actor: Actor, public_id: str, *, to_write: bool = False) -> Calendar:
    """The calendar in the caller's workspace, or 404 (another workspace's calendar is not revealed).
    `to_write`: for the engine's writes, which need its settings only (a per-process copy, no round
    trip: bookings/engine/calendars.py); its `version` is then not current."""
    find = engine.calendar_for_write if to_write else calendar_in_workspace
    calendar = find(workspace_id=actor.workspace.pk, public_id=public_id)
    if calendar is None:
        raise NotFound(f"No calendar {public_id} in this workspace.")
    return calendar


def calendars_for(actor: Actor, public_ids: list[str]) -> list[Calendar]:
    """The calendars named by `also_calendars`, for a write (settings from the per-process copies)."""
    return engine.calendars_for_write(workspace_id=actor.workspace.pk, public_ids=public_ids)


def parse_if_match(request: Request) -> int | None:
    raw = request.META.get("HTTP_IF_MATCH")
    if raw is None or raw.strip() == "*":
        return None
    value = raw.strip().removeprefix("W/").strip('"')
    if not value.isdigit():
        raise InvalidRequest('If-Match must be a calendar version ETag such as "42".')
    return int(value)


def etag(version: int) -> str:
    return f'"{version}"'


def check_window(window: Span) -> None:
    """An availability window: forwards, and no longer than the availability reads allow."""
    if window.end <= window.start:
        raise InvalidRange("end must be after start.")
    if window.duration > MAX_AVAILABILITY_WINDOW:
        raise InvalidRange(f"The window may span at most {MAX_AVAILABILITY_WINDOW.days} days.")


def span_from(data: dict[str, Any]) -> Span:
    return Span(data["start_time"], data["end_time"])


def bounded(bounds: tuple[int, int]) -> serializers.IntegerField:
    """An optional whole number within a calendar setting's bounds (CalendarBounds)."""
    low, high = bounds
    return serializers.IntegerField(min_value=low, max_value=high, required=False)


def staleness_field() -> serializers.IntegerField:
    """`max_upstream_staleness_seconds`: how old the calendars' upstream copies may be for this decision."""
    return serializers.IntegerField(
        min_value=0,
        max_value=86_400,
        required=False,
        help_text="Sync any linked calendar whose upstream copy is older than this many seconds before "
        "deciding; 503 upstream_stale if that cannot be done in time.",
    )
