"""Agent API for calendars, holds, commits and bookings. Views parse, call the engine, render."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import (
    BoundedJSONField,
    OffsetDateTimeField,
    OutputSerializer,
    StrictSerializer,
    TimezoneField,
    validated,
)
from agentcal.api.pagination import PageQuery
from agentcal.api.schema import page_of, problems
from agentcal.api.views import AgentAPIView
from agentcal.clock import server_now
from agentcal.errors import InvalidRange, InvalidRequest, NotFound
from agentcal.pagination import paginate
from bookings import engine, services
from bookings.models import Calendar, CalendarBounds, Reservation, ReservationStatus
from bookings.payloads import (
    BookingOutput,
    CalendarOutput,
    HoldOutput,
    booking_payload,
    hold_payload,
)
from bookings.search import EARLIEST, MAX_CANDIDATES, MAX_SEARCH_CALENDARS, ORDERS, find_common_time
from bookings.selectors import (
    MAX_AVAILABILITY_WINDOW,
    availability,
    calendar_in_workspace,
    reservation_group,
)
from bookings.spans import Span
from workspaces.actor import Actor
from workspaces.models import MAX_PRIORITY, MIN_PRIORITY, Scope

MAX_ALSO_CALENDARS = 20


# --- Shared helpers -----------------------------------------------------------------------------------


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
    found = {
        pid: c
        for pid in public_ids
        if (c := engine.calendar_for_write(workspace_id=actor.workspace.pk, public_id=pid)) is not None
    }
    missing = [pid for pid in public_ids if pid not in found]
    if missing:
        raise NotFound(f"No calendar {missing[0]} in this workspace.", missing_calendars=missing)
    return [found[pid] for pid in public_ids]


def parse_if_match(request: Request) -> int | None:
    raw = request.headers.get("If-Match")
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


# --- Calendars ------------------------------------------------------------------------------------------


def bounded(bounds: tuple[int, int]) -> serializers.IntegerField:
    """An optional whole number within a calendar setting's bounds (CalendarBounds)."""
    low, high = bounds
    return serializers.IntegerField(min_value=low, max_value=high, required=False)


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


# --- Availability ---------------------------------------------------------------------------------------


class AvailabilityQuery(serializers.Serializer):
    start = OffsetDateTimeField()
    end = OffsetDateTimeField()
    duration_minutes = bounded(CalendarBounds.MAX_BOOKING_MINUTES)


class BusyOutput(OutputSerializer):
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()
    status = serializers.CharField(help_text="`held` or `committed`; `busy` for upstream busy time.")
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
    required_scopes = {"GET": Scope.BOOKINGS_READ}
    audit_action = "calendar.availability"

    @extend_schema(parameters=[AvailabilityQuery], responses={200: AvailabilityOutput})
    def get(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id)
        query = validated(AvailabilityQuery, request.query_params.dict())
        window = Span(query["start"], query["end"])
        check_window(window)
        duration = query.get("duration_minutes")
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

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        named = [*attrs["calendars"], *attrs.get("optional_calendars", [])]
        if len(set(named)) != len(named):
            raise serializers.ValidationError(
                {"calendars": "Name each calendar once, as required or as optional."}
            )
        if attrs.get("min_optional", 0) > len(attrs.get("optional_calendars", [])):
            raise serializers.ValidationError({"min_optional": "More than the optional calendars named."})
        return attrs


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
    truncated = serializers.BooleanField(help_text="More candidates than `limit` were found.")
    reasons = serializers.DictField(
        child=serializers.BooleanField(),
        required=False,
        help_text="Why there are no candidates: `window_in_the_past`, `no_common_free_time`, "
        "`too_few_optional_free`.",
    )


class AvailabilitySearchView(AgentAPIView):
    required_scopes = {"POST": Scope.BOOKINGS_READ}
    audit_action = "calendar.availability"

    @extend_schema(
        request=AvailabilitySearchInput, responses={200: AvailabilitySearchOutput, **problems(404)}
    )
    def post(self, request: Request) -> Response:
        data = validated(AvailabilitySearchInput, request.data)
        window = Span(data["start"], data["end"])
        check_window(window)
        result = find_common_time(
            workspace_id=self.actor.workspace.pk,
            required=data["calendars"],
            optional=data.get("optional_calendars", []),
            min_optional=data.get("min_optional", 0),
            duration=timedelta(minutes=data["duration_minutes"]),
            window=window,
            granularity_minutes=data.get("granularity_minutes"),
            limit=data.get("limit", 10),
            order=data.get("order", EARLIEST),
        )
        payload: dict[str, Any] = {
            "candidates": result.candidates,  # Candidate and Span have the attributes the output names
            "versions": result.versions,
            "searched": result.searched,
            "truncated": result.truncated,
        }
        if result.reasons:
            payload["reasons"] = result.reasons
        return Response(AvailabilitySearchOutput(payload).data)


# --- Holds ------------------------------------------------------------------------------------------------


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


class HoldInput(ReservationInput):
    ttl_seconds = bounded(CalendarBounds.HOLD_TTL_SECONDS)


def _reservation_kwargs(actor: Actor, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "span": span_from(data),
        "priority": data.get("priority"),
        "also_calendars": calendars_for(actor, data.get("also_calendars", [])),
        "title": data.get("title", ""),
        "attendees": data.get("attendees"),
        "metadata": data.get("metadata"),
    }


class HoldCreateView(AgentAPIView):
    required_scopes = {"POST": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.hold"

    @extend_schema(request=HoldInput, responses={201: HoldOutput, **problems(412)})
    def post(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id, to_write=True)
        data = validated(HoldInput, request.data)
        group = engine.hold_create(
            actor=self.actor,
            calendar=calendar,
            ttl_seconds=data.get("ttl_seconds"),
            if_match=parse_if_match(request),
            **_reservation_kwargs(self.actor, data),
        )
        return Response(
            hold_payload(group),
            status=201,
            headers={
                "Location": f"/v1/holds/{group.primary.hold_id}",
                "ETag": etag(group.primary.fencing_token),
            },
        )


class HoldTokenInput(StrictSerializer):
    hold_token = serializers.CharField(max_length=100)


class HoldExtendInput(HoldTokenInput):
    ttl_seconds = bounded(CalendarBounds.HOLD_TTL_SECONDS)


class HoldDetailView(AgentAPIView):
    required_scopes = {"GET": Scope.BOOKINGS_READ, "DELETE": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.hold"

    @extend_schema(responses={200: HoldOutput})
    def get(self, request: Request, hold_id: str) -> Response:
        rows = reservation_group(workspace=self.actor.workspace, hold_id=hold_id)
        if not rows:
            raise NotFound(f"No hold {hold_id} in this workspace.")
        return Response(hold_payload(engine.ReservationGroup(rows=rows), now=server_now()))

    @extend_schema(
        request=HoldTokenInput,
        responses={200: HoldOutput},
        # Documented as the query parameter: OpenAPI describes no body on DELETE, and many clients
        # cannot send one. A JSON body {"hold_token": ...} is accepted too.
        parameters=[
            OpenApiParameter(
                "hold_token", {"type": "string", "minLength": 1, "maxLength": 100}, required=True
            )
        ],
    )
    def delete(self, request: Request, hold_id: str) -> Response:
        # The token may come in the body or, for clients that cannot send a DELETE body, the query.
        body = request.data
        if not body and "hold_token" in request.query_params:
            body = {"hold_token": request.query_params["hold_token"]}
        data = validated(HoldTokenInput, body)
        group = engine.hold_release(actor=self.actor, hold_id=hold_id, hold_token=data["hold_token"])
        return Response(hold_payload(group))


class HoldExtendView(AgentAPIView):
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


# --- Commits and bookings -------------------------------------------------------------------------------


_SPAN_FIELDS = ("start_time", "end_time", "priority", "title", "attendees", "metadata", "also_calendars")


class CommitInput(ReservationInput):
    """Either `hold_token` (promote a hold) or `start_time`/`end_time` (atomic hold + commit)."""

    openapi_constraints: ClassVar[dict[str, Any]] = {
        "oneOf": [
            {"required": ["hold_token"], "not": {"anyOf": [{"required": [name]} for name in _SPAN_FIELDS]}},
            {
                "required": ["start_time", "end_time"],
                "not": {"anyOf": [{"required": ["hold_token"]}, {"required": ["fencing_token"]}]},
            },
        ]
    }

    hold_token = serializers.CharField(max_length=100, required=False)
    fencing_token = serializers.IntegerField(min_value=0, required=False)
    start_time = OffsetDateTimeField(required=False)
    end_time = OffsetDateTimeField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "hold_token" in attrs:
            extra = sorted(set(attrs) - {"hold_token", "fencing_token"})
            if extra:
                raise serializers.ValidationError(
                    {name: ["Not allowed with hold_token: the hold already fixes it."] for name in extra}
                )
        else:
            missing = [name for name in ("start_time", "end_time") if name not in attrs]
            if missing:
                raise serializers.ValidationError(
                    {name: ["Required unless hold_token is given."] for name in missing}
                )
            if "fencing_token" in attrs:
                raise serializers.ValidationError({"fencing_token": ["Only meaningful with hold_token."]})
        return attrs


class CommitCreateView(AgentAPIView):
    required_scopes = {"POST": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.commit"

    @extend_schema(request=CommitInput, responses={201: BookingOutput, **problems(412)})
    def post(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id, to_write=True)
        data = validated(CommitInput, request.data)
        if "hold_token" in data:
            group = engine.hold_commit(
                actor=self.actor,
                calendar=calendar,
                hold_token=data["hold_token"],
                fencing_token=data.get("fencing_token"),
            )
        else:
            group = engine.booking_create(
                actor=self.actor,
                calendar=calendar,
                if_match=parse_if_match(request),
                **_reservation_kwargs(self.actor, data),
            )
        return Response(
            booking_payload(group),
            status=201,
            headers={"Location": f"/v1/bookings/{group.primary.booking_id}"},
        )


class BookingListQuery(PageQuery):
    start = OffsetDateTimeField(required=False)
    end = OffsetDateTimeField(required=False)
    status = serializers.ChoiceField(
        choices=["committed", "bumped", "cancelled", "all"], required=False, default="committed"
    )


class BookingListView(AgentAPIView):
    required_scopes = {"GET": Scope.BOOKINGS_READ}
    audit_action = "calendar.bookings"

    @extend_schema(parameters=[BookingListQuery], responses={200: page_of(BookingOutput)})
    def get(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id)
        query = validated(BookingListQuery, request.query_params.dict())
        rows = Reservation.objects.filter(calendar=calendar, booking_id__isnull=False).select_related(
            "calendar", "agent"
        )
        if query["status"] != "all":
            rows = rows.filter(status=query["status"])
        if "start" in query:
            rows = rows.filter(end_time__gt=query["start"])
        if "end" in query:
            rows = rows.filter(start_time__lt=query["end"])
        page, next_cursor = paginate(
            rows,
            cursor=query.get("cursor"),
            limit=query["limit"],
            descending=False,
            scope=f"bookings:{calendar.public_id}:{query['status']}:{query.get('start')}:{query.get('end')}",
            key_field="booking_id",
        )
        # One query for the other calendars' rows of every booking on the page (no N+1).
        groups: dict[str, list[Reservation]] = {}
        for row in reservation_group(workspace=self.actor.workspace, hold_id__in=[r.hold_id for r in page]):
            groups.setdefault(row.hold_id, []).append(row)
        now = server_now()
        results = [booking_payload(engine.ReservationGroup(rows=groups[r.hold_id]), now=now) for r in page]
        return Response({"results": results, "next_cursor": next_cursor})


class BookingDetailView(AgentAPIView):
    required_scopes = {"GET": Scope.BOOKINGS_READ, "DELETE": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.booking"

    @extend_schema(responses={200: BookingOutput})
    def get(self, request: Request, booking_id: str) -> Response:
        rows = reservation_group(workspace=self.actor.workspace, booking_id=booking_id)
        if not rows:
            raise NotFound(f"No booking {booking_id} in this workspace.")
        return Response(booking_payload(engine.ReservationGroup(rows=rows), now=server_now()))

    @extend_schema(request=None, responses={200: BookingOutput})
    def delete(self, request: Request, booking_id: str) -> Response:
        group = engine.booking_cancel(actor=self.actor, booking_id=booking_id)
        return Response(booking_payload(group, now=server_now()))
