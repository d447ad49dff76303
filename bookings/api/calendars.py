"""Agent API for calendars: create, read, and change their settings and rules."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import StrictSerializer, TimezoneField, validated
from agentcal.api.pagination import PageQuery
from agentcal.api.schema import page_of
from agentcal.api.views import AgentAPIView
from agentcal.errors import InvalidRequest
from agentcal.pagination import paginate
from bookings import services
from bookings.api.common import bounded, calendar_for
from bookings.models import Calendar, CalendarBounds
from bookings.payloads import CalendarOutput, DateOverridesField, WorkingHoursField
from bookings.rules import parse_rules
from workspaces.models import Scope


def _minutes(bounds: tuple[int, int], help_text: str) -> serializers.IntegerField:
    low, high = bounds
    return serializers.IntegerField(min_value=low, max_value=high, required=False, help_text=help_text)


class CalendarInput(StrictSerializer):
    name = serializers.CharField(max_length=200)
    timezone = TimezoneField(max_length=64, required=False)
    slot_minutes = bounded(CalendarBounds.SLOT_MINUTES)
    hold_ttl_seconds = bounded(CalendarBounds.HOLD_TTL_SECONDS)
    bump_window_seconds = bounded(CalendarBounds.BUMP_WINDOW_SECONDS)
    max_booking_minutes = bounded(CalendarBounds.MAX_BOOKING_MINUTES)
    working_hours = WorkingHoursField(required=False, allow_null=True)
    date_overrides = DateOverridesField(required=False, allow_null=True)
    buffer_before_minutes = _minutes(CalendarBounds.BUFFER_MINUTES, "Free time kept before everything on it.")
    buffer_after_minutes = _minutes(CalendarBounds.BUFFER_MINUTES, "Free time kept after everything on it.")
    min_notice_minutes = _minutes(CalendarBounds.MIN_NOTICE_MINUTES, "Nothing may start sooner than this.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # Both rule fields are checked together (one answer lists every problem) and stored as shown back.
        if "working_hours" in attrs or "date_overrides" in attrs:
            rules = parse_rules(
                working_hours=attrs.get("working_hours"), date_overrides=attrs.get("date_overrides")
            )
            if "working_hours" in attrs:
                hours = rules.working_hours
                attrs["working_hours"] = hours.to_json() if hours is not None else None
            if "date_overrides" in attrs:
                attrs["date_overrides"] = rules.date_overrides_json()
        return attrs


class CalendarListView(AgentAPIView):
    summaries = {"GET": "List calendars", "POST": "Create a calendar"}
    operation_ids = {"GET": "list_calendars", "POST": "create_calendar"}
    required_scopes = {"GET": Scope.CALENDARS_READ, "POST": Scope.CALENDARS_WRITE}
    audit_action = "calendar"

    @extend_schema(
        responses={200: page_of(CalendarOutput)},
        parameters=[PageQuery],
    )
    def get(self, request: Request) -> Response:
        query = validated(PageQuery, request.query_params.dict())
        calendars, next_cursor = paginate(
            Calendar.objects.filter(workspace=self.actor.workspace),
            cursor=query.get("cursor"),
            limit=query["limit"],
            descending=False,
            scope="calendars",
            key_field="public_id",
        )
        return Response({"results": CalendarOutput(calendars, many=True).data, "next_cursor": next_cursor})

    @extend_schema(request=CalendarInput, responses={201: CalendarOutput})
    def post(self, request: Request) -> Response:
        data = validated(CalendarInput, request.data)
        calendar = services.calendar_create(actor=self.actor, **data)
        return Response(
            CalendarOutput(calendar).data,
            status=201,
            headers={"Location": f"/v1/calendars/{calendar.public_id}"},
        )


class CalendarDetailView(AgentAPIView):
    summaries = {"GET": "Get a calendar", "PATCH": "Change a calendar's settings and rules"}
    operation_ids = {"GET": "get_calendar", "PATCH": "update_calendar"}
    required_scopes = {"GET": Scope.CALENDARS_READ, "PATCH": Scope.CALENDARS_WRITE}
    audit_action = "calendar"

    @extend_schema(responses={200: CalendarOutput})
    def get(self, request: Request, calendar_id: str) -> Response:
        return Response(CalendarOutput(calendar_for(self.actor, calendar_id)).data)

    @extend_schema(request=CalendarInput(partial=True), responses={200: CalendarOutput})
    def patch(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id)
        changes = validated(CalendarInput, request.data, partial=True)
        if not changes:
            raise InvalidRequest("Send at least one field to change.")
        calendar = services.calendar_update(actor=self.actor, calendar=calendar, changes=changes)
        return Response(CalendarOutput(calendar).data)
