"""Agent API for calendars: create, read, and change their settings and rules."""

from __future__ import annotations

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
from bookings.payloads import CalendarOutput
from workspaces.models import Scope


class CalendarInput(StrictSerializer):
    name = serializers.CharField(max_length=200)
    timezone = TimezoneField(max_length=64, required=False)
    slot_minutes = bounded(CalendarBounds.SLOT_MINUTES)
    hold_ttl_seconds = bounded(CalendarBounds.HOLD_TTL_SECONDS)
    bump_window_seconds = bounded(CalendarBounds.BUMP_WINDOW_SECONDS)
    max_booking_minutes = bounded(CalendarBounds.MAX_BOOKING_MINUTES)


class CalendarListView(AgentAPIView):
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
