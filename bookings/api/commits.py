"""Agent API for commits and bookings."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import OffsetDateTimeField, StrictSerializer, validated
from agentcal.api.pagination import PageQuery
from agentcal.api.schema import page_of, problems
from agentcal.api.views import AgentAPIView
from agentcal.clock import server_now
from agentcal.errors import NotFound
from agentcal.pagination import paginate
from bookings import engine
from bookings.api.availability import AvailabilitySearchInput, search_query
from bookings.api.common import calendar_for, parse_if_match, span_from, staleness_field
from bookings.api.holds import ReservationInput, reservation_kwargs
from bookings.models import Reservation
from bookings.payloads import BookingOutput, booking_payload
from bookings.selectors import reservation_group
from workspaces.models import Scope


class CommitHoldInput(StrictSerializer):
    hold_token = serializers.CharField(max_length=100, help_text="The `hold_token` the hold answered.")
    fencing_token = serializers.IntegerField(
        min_value=0, required=False, help_text="The hold's fencing token: a stale one is refused (409)."
    )

    def unknown_field_message(self, name: str) -> str:
        if name in BookSpanInput().fields:
            return "Not allowed with hold_token: the hold already fixes it."
        return super().unknown_field_message(name)


class BookSpanInput(ReservationInput):
    # A hold and its commit in one request.
    def unknown_field_message(self, name: str) -> str:
        if name in CommitHoldInput().fields:
            return "Only meaningful with hold_token; without it, give start_time and end_time."
        return super().unknown_field_message(name)


# Two named shapes rather than one with "either these or those" rules: a generated client gets a type for
# each, told apart by `hold_token`.
COMMIT_INPUT = PolymorphicProxySerializer(
    component_name="CommitInput",
    serializers=[CommitHoldInput, BookSpanInput],
    resource_type_field_name=None,
)


def commit_input_for(body: Any) -> type[StrictSerializer]:
    return CommitHoldInput if isinstance(body, dict) and "hold_token" in body else BookSpanInput


class CommitCreateView(AgentAPIView):
    summaries = {"POST": "Commit a hold, or book a span directly"}
    operation_ids = {"POST": "commit_booking"}
    required_scopes = {"POST": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.commit"
    honours_if_match = True

    @extend_schema(request=COMMIT_INPUT, responses={201: BookingOutput, **problems(412)})
    def post(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id, to_write=True)
        data = validated(commit_input_for(request.data), request.data)
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
                **reservation_kwargs(self.actor, data),
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
    summaries = {"GET": "List a calendar's bookings"}
    operation_ids = {"GET": "list_bookings"}
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
    summaries = {"GET": "Get a booking", "DELETE": "Cancel a booking"}
    operation_ids = {"GET": "get_booking", "DELETE": "cancel_booking"}
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


class _MoveOptions(StrictSerializer):
    fencing_token = serializers.IntegerField(
        min_value=0, required=False, help_text="The booking's current fencing token, if the agent holds one."
    )
    ignore_rules = serializers.BooleanField(
        required=False, help_text="Pass over the calendars' rules (needs `bookings:override_rules`; audited)."
    )
    max_upstream_staleness_seconds = staleness_field()


class MoveToSpanInput(_MoveOptions):
    start_time = OffsetDateTimeField()
    end_time = OffsetDateTimeField()

    def unknown_field_message(self, name: str) -> str:
        if name == "search":
            return "Send either start_time and end_time, or search."
        return super().unknown_field_message(name)


class MoveBySearchInput(_MoveOptions):
    search = AvailabilitySearchInput(
        help_text="The best time on the booking's own calendars (name exactly those).",
    )

    def unknown_field_message(self, name: str) -> str:
        if name in ("start_time", "end_time"):
            return "Send either start_time and end_time, or search."
        return super().unknown_field_message(name)


MOVE_INPUT = PolymorphicProxySerializer(
    component_name="BookingMoveInput",
    serializers=[MoveToSpanInput, MoveBySearchInput],
    resource_type_field_name=None,
)


def move_input_for(body: Any) -> type[StrictSerializer]:
    return MoveBySearchInput if isinstance(body, dict) and "search" in body else MoveToSpanInput


class BookingMoveView(AgentAPIView):
    summaries = {"POST": "Move a booking to another span"}
    operation_ids = {"POST": "move_booking"}
    required_scopes = {"POST": Scope.BOOKINGS_WRITE}
    audit_action = "calendar.booking.move"
    honours_if_match = True

    @extend_schema(request=MOVE_INPUT, responses={200: BookingOutput, **problems(412)})
    def post(self, request: Request, booking_id: str) -> Response:
        data = validated(move_input_for(request.data), request.data)
        # The search's own bound counts too (it is the same field as on POST /v1/availability/search);
        # with both given, the stricter decides.
        bounds = [
            data.get("max_upstream_staleness_seconds"),
            data.get("search", {}).get("max_upstream_staleness_seconds"),
        ]
        staleness = min((b for b in bounds if b is not None), default=None)
        group = engine.booking_move(
            actor=self.actor,
            booking_id=booking_id,
            span=span_from(data) if "search" not in data else None,
            query=search_query(data["search"]) if "search" in data else None,
            if_match=parse_if_match(request),
            fencing_token=data.get("fencing_token"),
            ignore_rules=data.get("ignore_rules", False),
            max_upstream_staleness_seconds=staleness,
        )
        return Response(booking_payload(group, now=server_now()))
