"""Agent API for holds: create (at a span, or at the best time a search finds), read, extend, release."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import BoundedJSONField, OffsetDateTimeField, StrictSerializer, validated
from agentcal.api.schema import problems
from agentcal.api.views import AgentAPIView
from agentcal.clock import isoformat_z, server_now
from agentcal.errors import NotFound
from bookings import engine
from bookings.api.availability import AvailabilitySearchInput, SearchedOutput, search_query
from bookings.api.common import (
    MAX_ALSO_CALENDARS,
    bounded,
    calendar_for,
    calendars_for,
    etag,
    parse_if_match,
    span_from,
    staleness_field,
)
from bookings.models import CalendarBounds
from bookings.payloads import HoldCreatedOutput, HoldOutput, hold_payload
from bookings.selectors import reservation_group
from workspaces.actor import Actor
from workspaces.models import MAX_PRIORITY, MIN_PRIORITY, Scope


class ReservationInput(StrictSerializer):
    start_time = OffsetDateTimeField()
    end_time = OffsetDateTimeField()
    priority = serializers.IntegerField(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY, required=False)
    title = serializers.CharField(max_length=500, required=False, allow_blank=True)
    attendees = BoundedJSONField(expect=list, required=False)
    metadata = BoundedJSONField(expect=dict, required=False)
    also_calendars = serializers.ListField(
        child=serializers.CharField(max_length=32), required=False, max_length=MAX_ALSO_CALENDARS
    )
    ignore_rules = serializers.BooleanField(
        required=False,
        help_text="Pass over the calendars' working hours, buffers and notice (needs the "
        "`bookings:override_rules` scope; audited).",
    )
    max_upstream_staleness_seconds = staleness_field()


class HoldInput(ReservationInput):
    ttl_seconds = bounded(CalendarBounds.HOLD_TTL_SECONDS)


def reservation_kwargs(actor: Actor, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "span": span_from(data),
        "priority": data.get("priority"),
        "also_calendars": calendars_for(actor, data.get("also_calendars", [])),
        "title": data.get("title", ""),
        "attendees": data.get("attendees"),
        "metadata": data.get("metadata"),
        "ignore_rules": data.get("ignore_rules", False),
        "max_upstream_staleness_seconds": data.get("max_upstream_staleness_seconds"),
    }


class HoldCreateView(AgentAPIView):
    summaries = {"POST": "Hold a span on a calendar"}
    operation_ids = {"POST": "create_hold"}
    required_scopes = {"POST": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.hold"
    honours_if_match = True
    answers_etag = True

    @extend_schema(request=HoldInput, responses={201: HoldCreatedOutput, **problems(412)})
    def post(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id, to_write=True)
        data = validated(HoldInput, request.data)
        group = engine.hold_create(
            actor=self.actor,
            calendar=calendar,
            ttl_seconds=data.get("ttl_seconds"),
            if_match=parse_if_match(request),
            **reservation_kwargs(self.actor, data),
        )
        return Response(
            hold_payload(group),
            status=201,
            headers={
                "Location": f"/v1/holds/{group.primary.hold_id}",
                "ETag": etag(group.primary.fencing_token),
            },
        )


class FindAndHoldInput(StrictSerializer):
    search = AvailabilitySearchInput(help_text="The search, as for POST /v1/availability/search.")
    ttl_seconds = bounded(CalendarBounds.HOLD_TTL_SECONDS)
    priority = serializers.IntegerField(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY, required=False)
    title = serializers.CharField(max_length=500, required=False, allow_blank=True)
    attendees = BoundedJSONField(expect=list, required=False)
    metadata = BoundedJSONField(expect=dict, required=False)


class FoundHoldOutput(HoldCreatedOutput):
    candidate_rank = serializers.IntegerField(
        help_text="Which of the search's candidates was held: 1 is the best; n means n - 1 better ones "
        "were taken by other writes between the search and the lock."
    )
    searched = SearchedOutput()


class FindAndHoldView(AgentAPIView):
    summaries = {"POST": "Find the best time and hold it in one write"}
    operation_ids = {"POST": "find_and_hold"}
    required_scopes = {"POST": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.hold"
    counts_as_search = True
    answers_etag = True

    @extend_schema(request=FindAndHoldInput, responses={201: FoundHoldOutput, **problems(404)})
    def post(self, request: Request) -> Response:
        data = validated(FindAndHoldInput, request.data)
        found = engine.hold_found_time(
            actor=self.actor,
            query=search_query(data["search"]),
            priority=data.get("priority"),
            ttl_seconds=data.get("ttl_seconds"),
            title=data.get("title", ""),
            attendees=data.get("attendees"),
            metadata=data.get("metadata"),
            max_upstream_staleness_seconds=data["search"].get("max_upstream_staleness_seconds"),
        )
        payload = {
            **hold_payload(found.group),
            "candidate_rank": found.candidate_rank,
            "searched": {"start": isoformat_z(found.searched.start), "end": isoformat_z(found.searched.end)},
        }
        return Response(
            payload,
            status=201,
            headers={
                "Location": f"/v1/holds/{found.group.primary.hold_id}",
                "ETag": etag(found.group.primary.fencing_token),
            },
        )


class HoldTokenInput(StrictSerializer):
    hold_token = serializers.CharField(max_length=100)


class HoldExtendInput(HoldTokenInput):
    ttl_seconds = bounded(CalendarBounds.HOLD_TTL_SECONDS)


class HoldDetailView(AgentAPIView):
    summaries = {"GET": "Get a hold", "DELETE": "Release a hold"}
    operation_ids = {"GET": "get_hold", "DELETE": "release_hold"}
    required_scopes = {"GET": Scope.BOOKINGS_READ, "DELETE": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.hold"
    delete_takes_body = True

    @extend_schema(responses={200: HoldOutput})
    def get(self, request: Request, hold_id: str) -> Response:
        rows = reservation_group(workspace=self.actor.workspace, hold_id=hold_id)
        if not rows:
            raise NotFound(f"No hold {hold_id} in this workspace.")
        return Response(hold_payload(engine.ReservationGroup(rows=rows), now=server_now()))

    # The token goes in the body, as the schema says: a secret in a URL ends up in access logs. The query
    # form (`?hold_token=`) is still taken from clients that cannot send a DELETE body.
    @extend_schema(request=HoldTokenInput, responses={200: HoldOutput})
    def delete(self, request: Request, hold_id: str) -> Response:
        body = request.data
        if not body and "hold_token" in request.query_params:
            body = {"hold_token": request.query_params["hold_token"]}
        data = validated(HoldTokenInput, body)
        group = engine.hold_release(actor=self.actor, hold_id=hold_id, hold_token=data["hold_token"])
        return Response(hold_payload(group))


class HoldExtendView(AgentAPIView):
    summaries = {"POST": "Extend a hold's expiry (heartbeat)"}
    operation_ids = {"POST": "extend_hold"}
    required_scopes = {"POST": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.hold.extend"

    @extend_schema(request=HoldExtendInput, responses={200: HoldOutput})
    def post(self, request: Request, hold_id: str) -> Response:
        data = validated(HoldExtendInput, request.data)
        ttl = data.get("ttl_seconds")
        if ttl is None:
            rows = reservation_group(workspace=self.actor.workspace, hold_id=hold_id)
            ttl = rows[0].calendar.hold_ttl_seconds if rows else 30
        group = engine.hold_extend(
            actor=self.actor, hold_id=hold_id, hold_token=data["hold_token"], ttl_seconds=ttl
        )
        return Response(hold_payload(group))
