"""Agent API for reading availability: one calendar's busy and free time, and the search across calendars."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import OffsetDateTimeField, OutputSerializer, StrictSerializer, validated
from agentcal.api.schema import problems
from agentcal.api.views import AgentAPIView
from bookings.api.common import bounded, calendar_for, check_window, etag, staleness_field
from bookings.engine.rules import check_span_length
from bookings.freshness import require_fresh
from bookings.models import CalendarBounds, ReservationStatus
from bookings.search import (
    EARLIEST,
    MAX_CANDIDATES,
    MAX_SEARCH_CALENDARS,
    MAX_WEIGHED_SLOTS,
    ORDERS,
    SearchQuery,
    find_common_time,
)
from bookings.selectors import availability
from bookings.spans import Span
from workspaces.models import Scope


class AvailabilityQuery(serializers.Serializer):
    start = OffsetDateTimeField()
    end = OffsetDateTimeField()
    duration_minutes = bounded(CalendarBounds.MAX_BOOKING_MINUTES)


class BusyOutput(OutputSerializer):
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()
    status = serializers.ChoiceField(
        choices=["held", "committed", "busy"], help_text="`busy` for upstream busy time."
    )
    priority = serializers.IntegerField(allow_null=True, help_text="null for upstream busy time.")
    agent_id = serializers.CharField(allow_null=True, help_text="null for upstream busy time.")
    id = serializers.CharField(
        allow_null=True, help_text="The hold or booking id; null for upstream busy time."
    )
    expires_at = serializers.DateTimeField(required=False)
    bump_window_ends_at = serializers.DateTimeField(required=False)
    # A field named like Field.source: DRF moves it into _declared_fields, so it works; mypy can't tell.
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="`agentcal` for reservations; `caldav`, `google` or `microsoft` for the calendar "
        "owner's own (synced) busy time, which no priority takes over."
    )


class FreeSlotOutput(OutputSerializer):
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()


class AvailabilityOutput(OutputSerializer):
    calendar = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    busy = BusyOutput(many=True)
    free_slots = FreeSlotOutput(many=True)
    version = serializers.IntegerField()
    server_time = serializers.DateTimeField()


class AvailabilityView(AgentAPIView):
    summaries = {"GET": "Read a calendar's busy time and version"}
    operation_ids = {"GET": "get_availability"}
    required_scopes = {"GET": Scope.BOOKINGS_READ}
    audit_action = "calendar.availability"
    answers_etag = True

    @extend_schema(parameters=[AvailabilityQuery], responses={200: AvailabilityOutput, **problems(422)})
    def get(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id)
        query = validated(AvailabilityQuery, request.query_params.dict())
        window = Span(query["start"], query["end"])
        check_window(window)
        duration = query.get("duration_minutes")
        if duration:
            # Free slots are what a hold could take: none of a length the calendar refuses (as the search).
            check_span_length(Span(window.start, window.start + timedelta(minutes=duration)), [calendar])
        result = availability(
            calendar=calendar, window=window, duration=timedelta(minutes=duration) if duration else None
        )
        busy: list[dict[str, Any]] = []
        for row in result.busy:
            entry = {
                "start_time": row.start_time,
                "end_time": row.end_time,
                "status": row.status,
                "priority": row.priority,
                "agent_id": row.agent.public_id,
                "id": row.booking_id or row.hold_id,
                "source": "agentcal",
            }
            if row.status == ReservationStatus.HELD:
                entry["expires_at"] = row.expires_at
            else:
                entry["bump_window_ends_at"] = row.bump_window_ends_at
            busy.append(entry)
        for block in result.upstream:
            busy.append(
                {
                    "start_time": block.start_time,
                    "end_time": block.end_time,
                    "status": "busy",
                    "priority": None,
                    "agent_id": None,
                    "id": None,
                    "source": block.source,
                }
            )
        busy.sort(key=lambda entry: entry["start_time"])
        payload = AvailabilityOutput(
            {
                "calendar": calendar.public_id,
                "start": window.start,
                "end": window.end,
                "busy": busy,
                "free_slots": [{"start_time": s.start, "end_time": s.end} for s in result.free_slots],
                "version": result.version,
                "server_time": result.server_time,
            }
        ).data
        return Response(payload, headers={"ETag": etag(result.version)})


class AvailabilitySearchInput(StrictSerializer):
    calendars = serializers.ListField(
        child=serializers.CharField(max_length=32), min_length=1, max_length=MAX_SEARCH_CALENDARS
    )
    optional_calendars = serializers.ListField(
        child=serializers.CharField(max_length=32), required=False, max_length=MAX_SEARCH_CALENDARS
    )
    min_optional = serializers.IntegerField(min_value=0, max_value=MAX_SEARCH_CALENDARS, required=False)
    duration_minutes = serializers.IntegerField(min_value=1, max_value=CalendarBounds.MAX_BOOKING_MINUTES[1])
    start = OffsetDateTimeField()
    end = OffsetDateTimeField()
    granularity_minutes = bounded(CalendarBounds.SLOT_MINUTES)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_CANDIDATES, required=False)
    order = serializers.ChoiceField(choices=ORDERS, required=False)
    max_upstream_staleness_seconds = staleness_field()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        named = [*attrs["calendars"], *attrs.get("optional_calendars", [])]
        if len(set(named)) != len(named):
            raise serializers.ValidationError(
                {"calendars": "Name each calendar once, as required or as optional."}
            )
        if attrs.get("min_optional", 0) > len(attrs.get("optional_calendars", [])):
            raise serializers.ValidationError({"min_optional": "More than the optional calendars named."})
        return attrs


def search_query(data: dict[str, Any]) -> SearchQuery:
    """The search an AvailabilitySearchInput describes (its window checked)."""
    window = Span(data["start"], data["end"])
    check_window(window)
    return SearchQuery(
        required=data["calendars"],
        optional=data.get("optional_calendars", []),
        min_optional=data.get("min_optional", 0),
        duration=timedelta(minutes=data["duration_minutes"]),
        window=window,
        granularity_minutes=data.get("granularity_minutes"),
        limit=data.get("limit", 10),
        order=data.get("order", EARLIEST),
    )


class CandidateOutput(OutputSerializer):
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()
    calendars = serializers.ListField(child=serializers.CharField(), help_text="The required calendars.")
    optional_free = serializers.ListField(
        child=serializers.CharField(), help_text="The optional calendars free for the whole span."
    )


class SearchedOutput(OutputSerializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class AvailabilitySearchOutput(OutputSerializer):
    candidates = CandidateOutput(many=True)
    versions = serializers.DictField(
        child=serializers.IntegerField(), help_text="Every calendar read: its version (ETag) then."
    )
    searched = SearchedOutput(help_text="The window searched: from the later of `start` and now.")
    truncated = serializers.BooleanField(
        help_text="There is more than this answer shows: more candidates than `limit` were found, or a "
        f"search that weighs every slot stopped after {MAX_WEIGHED_SLOTS:,} (then `searched.end` is where it "
        "stopped)."
    )
    reasons = serializers.DictField(
        child=serializers.BooleanField(),
        required=False,
        help_text="Why there are no candidates: `window_in_the_past`, `window_too_short`, "
        "`insufficient_notice`, `no_common_working_hours`, `no_common_free_time`, `too_few_optional_free`.",
    )


class AvailabilitySearchView(AgentAPIView):
    summaries = {"POST": "Find times free on every required calendar"}
    operation_ids = {"POST": "search_availability"}
    required_scopes = {"POST": Scope.BOOKINGS_READ}
    audit_action = "calendar.availability"
    counts_as_search = True

    @extend_schema(
        request=AvailabilitySearchInput, responses={200: AvailabilitySearchOutput, **problems(404)}
    )
    def post(self, request: Request) -> Response:
        data = validated(AvailabilitySearchInput, request.data)
        query = search_query(data)
        if "max_upstream_staleness_seconds" in data:
            linked = [
                calendar_for(self.actor, pid, to_write=True) for pid in (*query.required, *query.optional)
            ]
            require_fresh(linked, data["max_upstream_staleness_seconds"])
        result = find_common_time(workspace_id=self.actor.workspace.pk, query=query)
        payload: dict[str, Any] = {
            "candidates": result.candidates,  # Candidate and Span have the attributes the output names
            "versions": result.versions,
            "searched": result.searched,
            "truncated": result.truncated,
        }
        if result.reasons:
            payload["reasons"] = result.reasons
        return Response(AvailabilitySearchOutput(payload).data)
