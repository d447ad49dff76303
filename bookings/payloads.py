"""What the agent API answers about calendars, holds and bookings: the output shapes, and the payloads
built from the engine's reservation groups (a status as a reader sees it at the database's now)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentcal.api.fields import FreeFormObjectField, OutputSerializer
from agentcal.api.schema import FreeSpanOutput, SpanOutput
from agentcal.clock import isoformat_z
from bookings import engine
from bookings.models import BOOKING_STATUSES, Reservation, ReservationStatus, UpstreamSource
from bookings.rules import MAX_DATE_OVERRIDES, MAX_INTERVALS_PER_DAY, WEEKDAYS

_CLOCK_TIME = {"type": "string", "pattern": "^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$", "example": "09:00"}
_DAY_HOURS = {
    "type": "array",
    "maxItems": MAX_INTERVALS_PER_DAY,
    "items": {"type": "array", "items": _CLOCK_TIME, "minItems": 2, "maxItems": 2},
    "description": "[start, end) pairs of local wall-clock times, in order, not overlapping; [] is closed.",
}


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "properties": dict.fromkeys(WEEKDAYS, _DAY_HOURS),
        "additionalProperties": False,
        "description": "The weekly hours in the calendar's `timezone`; a weekday left out is closed; "
        "null: open at any time.",
        "example": {"mon": [["09:00", "12:30"], ["13:30", "17:00"]], "sat": [], "sun": []},
    }
)
class WorkingHoursField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": _DAY_HOURS,
        "maxProperties": MAX_DATE_OVERRIDES,
        "description": "Dates (YYYY-MM-DD, in the calendar's zone) whose hours replace the weekday's; "
        "[] closes the date.",
        "example": {"2026-12-24": [], "2026-12-31": [["10:00", "14:00"]]},
    }
)
class DateOverridesField(serializers.JSONField):
    pass


class CalendarOutput(OutputSerializer):
    id = serializers.CharField(source="public_id")
    name = serializers.CharField()
    timezone = serializers.CharField()
    slot_minutes = serializers.IntegerField()
    hold_ttl_seconds = serializers.IntegerField()
    bump_window_seconds = serializers.IntegerField()
    max_booking_minutes = serializers.IntegerField()
    working_hours = WorkingHoursField(help_text="Weekly hours in `timezone`; null: open at any time.")
    date_overrides = DateOverridesField()
    buffer_before_minutes = serializers.IntegerField()
    buffer_after_minutes = serializers.IntegerField()
    min_notice_minutes = serializers.IntegerField()
    version = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class CalendarShareOutput(OutputSerializer):
    calendar = serializers.CharField()
    fencing_token = serializers.IntegerField()


class DisplacedOutput(OutputSerializer):
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=ReservationStatus.choices, help_text="Its status now.")
    agent_id = serializers.CharField()
    priority = serializers.IntegerField()


class ReservationOutput(OutputSerializer):
    """Fields common to holds and bookings."""

    id = serializers.CharField()
    status = serializers.ChoiceField(choices=ReservationStatus.choices)
    calendar = serializers.CharField()
    also_calendars = serializers.ListField(child=serializers.CharField())
    calendars = CalendarShareOutput(many=True)
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()
    priority = serializers.IntegerField()
    fencing_token = serializers.IntegerField()
    agent_id = serializers.CharField()
    title = serializers.CharField()
    attendees = serializers.JSONField()
    metadata = FreeFormObjectField(help_text="The agent's own data, as it was sent.")
    created_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)


class HoldOutput(ReservationOutput):
    hold_token = serializers.CharField(
        required=False, help_text="Only in the response that created the hold."
    )
    expires_at = serializers.DateTimeField(allow_null=True, help_text="Null once the hold became a booking.")
    booking_id = serializers.CharField(allow_null=True)
    displaced = DisplacedOutput(many=True, required=False)


class HoldCreatedOutput(HoldOutput):
    hold_token = serializers.CharField(
        help_text="The hold's secret: heartbeat, release and commit with it. Only in this answer."
    )


class BookingOutput(ReservationOutput):
    status = serializers.ChoiceField(choices=BOOKING_STATUSES)
    hold_id = serializers.CharField()
    committed_at = serializers.DateTimeField()
    bump_window_ends_at = serializers.DateTimeField()
    frozen = serializers.BooleanField(help_text="True once the bump window has passed: no priority moves it.")
    upstream_conflict = serializers.BooleanField(
        help_text="True while an event in the calendar owner's own (synced) calendar overlaps this "
        "booking. The booking stays; `booking.upstream_conflict` announced it."
    )
    displaced = DisplacedOutput(many=True, required=False)


def _effective_status(row: Reservation, now: datetime | None) -> str:
    # A lapsed hold reads as expired, whether or not the sweep has run yet (no `now`: just created).
    return row.status if now is None else row.status_at(now)


# The answers are built as the output serializers above would render them (same keys, same order,
# timestamps as ISO 8601 in UTC with `Z`) without running them: DRF's per-field rendering was about 6 %
# of a write request's CPU. The serializers still define the published schema, and
# tests/bookings/test_payload_shapes.py holds the two together.


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else isoformat_z(moment)


def _common(rows: list[Reservation], now: datetime | None) -> dict[str, Any]:
    head = rows[0]
    return {
        "status": _effective_status(head, now),
        "calendar": head.calendar.public_id,
        "also_calendars": [r.calendar.public_id for r in rows[1:]],
        "calendars": [{"calendar": r.calendar.public_id, "fencing_token": r.fencing_token} for r in rows],
        "start_time": isoformat_z(head.start_time),
        "end_time": isoformat_z(head.end_time),
        "priority": head.priority,
        "fencing_token": head.fencing_token,
        "agent_id": head.agent.public_id,
        "title": head.title,
        "attendees": head.attendees,
        "metadata": head.metadata,
        "created_at": isoformat_z(head.created_at),
        "ended_at": _when(head.ended_at),
    }


def _displaced(group: engine.ReservationGroup) -> list[dict[str, Any]]:
    return [
        {
            "id": r.booking_id or r.hold_id,
            "status": r.status,
            "agent_id": r.agent.public_id,
            "priority": r.priority,
        }
        for r in group.displaced
        if r.is_primary
    ]


def hold_payload(group: engine.ReservationGroup, now: datetime | None = None) -> dict[str, Any]:
    head = group.primary
    payload = {"id": head.hold_id, **_common(group.rows, now)}
    if group.hold_token:
        payload["hold_token"] = group.hold_token
    payload["expires_at"] = _when(head.expires_at)
    payload["booking_id"] = head.booking_id
    if group.displaced:
        payload["displaced"] = _displaced(group)
    return payload


def booking_payload(group: engine.ReservationGroup, now: datetime | None = None) -> dict[str, Any]:
    head = group.primary
    payload = {
        "id": head.booking_id,
        **_common(group.rows, now),
        "hold_id": head.hold_id,
        "committed_at": _when(head.committed_at),
        "bump_window_ends_at": _when(head.bump_window_ends_at),
        "frozen": now is not None and head.is_frozen_at(now),
        "upstream_conflict": any(r.upstream_conflict_at is not None for r in group.rows),
    }
    if group.displaced:
        payload["displaced"] = _displaced(group)
    return payload


# --- What reservation events carry (bookings.events builds them; agentcal.api.event_catalog publishes) ---


class ReservationEventOutput(OutputSerializer):
    id = serializers.CharField(help_text="The booking id once committed, else the hold id.")
    hold_id = serializers.CharField()
    booking_id = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=ReservationStatus.choices)
    calendar = serializers.CharField()
    also_calendars = serializers.ListField(child=serializers.CharField())
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()
    priority = serializers.IntegerField()
    fencing_token = serializers.IntegerField()
    agent_id = serializers.CharField()
    title = serializers.CharField()
    metadata = FreeFormObjectField(help_text="The agent's own data, as it was sent.")
    expires_at = serializers.DateTimeField(allow_null=True)
    committed_at = serializers.DateTimeField(allow_null=True)
    bump_window_ends_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    upstream_conflict = serializers.BooleanField()


class DisplacerOutput(OutputSerializer):
    id = serializers.CharField(help_text="The hold or booking that took the span.")
    agent_id = serializers.CharField()
    priority = serializers.IntegerField()


class UpstreamBusyOutput(OutputSerializer):
    calendar = serializers.CharField()
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()
    source = serializers.ChoiceField(choices=UpstreamSource.choices)  # type: ignore[assignment]


class HoldEventOutput(OutputSerializer):
    hold = ReservationEventOutput()


class BookingEventOutput(OutputSerializer):
    booking = ReservationEventOutput()


class _Displacement(OutputSerializer):
    reason = serializers.ChoiceField(
        choices=["priority", "upstream_event"],
        help_text="`priority`: a strictly higher priority took the span (`displaced_by`); `upstream_event`: "
        "the person's own calendar did (`upstream`).",
    )
    alternatives = FreeSpanOutput(
        many=True, help_text="Free spans near the lost one, computed when it was lost."
    )
    displaced_by = DisplacerOutput(required=False)
    upstream = UpstreamBusyOutput(required=False)


class HoldEvictedOutput(_Displacement, HoldEventOutput):
    pass


class BookingBumpedOutput(_Displacement, BookingEventOutput):
    pass


class BookingMovedOutput(BookingEventOutput):
    def get_fields(self) -> dict[str, serializers.Field]:
        # `from` is a Python keyword: declared here rather than as a class attribute.
        fields: dict[str, serializers.Field] = super().get_fields()
        fields["from"] = SpanOutput()
        fields["to"] = SpanOutput()
        return fields


class BookingUpstreamConflictOutput(BookingEventOutput):
    upstream = UpstreamBusyOutput()
