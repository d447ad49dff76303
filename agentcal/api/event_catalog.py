"""Every event's shape, published: each webhook in the schema's `webhooks` section (the Standard Webhooks
body `{id, type, timestamp, data}` with that event's `data`), and GET /v1/events as a union told apart by
`type`, so generated clients get a type per event instead of `data: {}`.

The shapes live with the apps that build them (bookings.payloads, approvals.api, inboxes.api, sync.api,
guardrails.payloads); this module only says which event carries which, so it sits with the URL table,
above every app.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, OpenApiWebhook, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import OutputSerializer
from approvals.api import ApprovalEventOutput
from bookings.payloads import (
    BookingBumpedOutput,
    BookingEventOutput,
    BookingMovedOutput,
    BookingUpstreamConflictOutput,
    HoldEventOutput,
    HoldEvictedOutput,
)
from guardrails.payloads import PauseEventOutput
from inboxes.api import (
    BookingAttendeeRespondedOutput,
    MessageFailedOutput,
    MessageReceivedOutput,
    MessageSentOutput,
)
from sync.api import ConnectionFailedOutput
from webhooks import api as webhooks
from webhooks.models import EventType

EVENT_DATA: dict[EventType, type[serializers.Serializer]] = {
    EventType.HOLD_CREATED: HoldEventOutput,
    EventType.HOLD_EXPIRED: HoldEventOutput,
    EventType.HOLD_EVICTED: HoldEvictedOutput,
    EventType.HOLD_RELEASED: HoldEventOutput,
    EventType.BOOKING_COMMITTED: BookingEventOutput,
    EventType.BOOKING_BUMPED: BookingBumpedOutput,
    EventType.BOOKING_CANCELLED: BookingEventOutput,
    EventType.BOOKING_MOVED: BookingMovedOutput,
    EventType.BOOKING_UPSTREAM_CONFLICT: BookingUpstreamConflictOutput,
    EventType.BOOKING_ATTENDEE_RESPONDED: BookingAttendeeRespondedOutput,
    EventType.APPROVAL_REQUESTED: ApprovalEventOutput,
    EventType.APPROVAL_APPROVED: ApprovalEventOutput,
    EventType.APPROVAL_DENIED: ApprovalEventOutput,
    EventType.APPROVAL_EXPIRED: ApprovalEventOutput,
    EventType.APPROVAL_CANCELLED: ApprovalEventOutput,
    EventType.MESSAGE_RECEIVED: MessageReceivedOutput,
    EventType.MESSAGE_SENT: MessageSentOutput,
    EventType.MESSAGE_FAILED: MessageFailedOutput,
    EventType.CONNECTION_FAILED: ConnectionFailedOutput,
    EventType.AGENT_PAUSED: PauseEventOutput,
    EventType.AGENT_RESUMED: PauseEventOutput,
    EventType.WORKSPACE_PAUSED: PauseEventOutput,
    EventType.WORKSPACE_RESUMED: PauseEventOutput,
}


def event_name(event_type: EventType) -> str:
    """`hold.evicted` → `HoldEvicted`: the stem of its components' names."""
    return "".join(part.capitalize() for part in event_type.value.replace(".", "_").split("_"))


def _only(event_type: EventType) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=[event_type.value])


def _delivery_body(event_type: EventType) -> type[serializers.Serializer]:
    """What the receiver's endpoint is sent for this event."""
    return type(
        f"{event_name(event_type)}Webhook",
        (OutputSerializer,),
        {
            "id": serializers.CharField(
                help_text="The event id, as in the `webhook-id` header: deduplicate on it."
            ),
            "type": _only(event_type),
            "timestamp": serializers.DateTimeField(),
            "data": EVENT_DATA[event_type](),
            "__module__": __name__,
        },
    )


def _listed(event_type: EventType) -> type[serializers.Serializer]:
    """The event as GET /v1/events lists it."""
    return type(
        f"{event_name(event_type)}Event",
        (webhooks.EventOutput,),
        {"type": _only(event_type), "data": EVENT_DATA[event_type](), "__module__": __name__},
    )


WEBHOOKS = [
    OpenApiWebhook(
        name=event_type.value,
        decorator=extend_schema(
            summary=f"The {event_type.value} event",
            description=f"Sent to the agent's endpoints subscribed to `{event_type.value}` (or its family, "
            "or `*`), signed with Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, "
            "`webhook-signature`). Any 2xx acknowledges it; anything else is retried.",
            request=_delivery_body(event_type),
            responses={200: OpenApiResponse(description="Received (any 2xx will do).")},
        ),
    )
    for event_type in EventType
]

_EVENT = PolymorphicProxySerializer(
    component_name="Event",
    serializers={event_type.value: _listed(event_type) for event_type in EventType},
    resource_type_field_name="type",
    many=True,
)
EventPage = type(
    "EventPage",
    (OutputSerializer,),
    {
        "results": _EVENT,
        "next_cursor": serializers.CharField(
            allow_null=True, help_text="Pass as `cursor` for the next page; null on the last page."
        ),
        "__module__": __name__,
    },
)


class EventListView(webhooks.EventListView):
    @extend_schema(parameters=[webhooks.EventListQuery], responses={200: EventPage})
    def get(self, request: Request) -> Response:
        """The agent's outbox: every event addressed to it, newest first, with its deliveries."""
        return super().get(request)


def webhook_operations(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """A postprocessing hook: each webhook named for generators (`on_hold_evicted`), and keyless, since the
    receiver checks the Standard Webhooks signature rather than an API key (drf-spectacular's webhook
    description takes neither)."""
    for name, operations in result.get("webhooks", {}).items():
        for operation in operations.values():
            operation["operationId"] = "on_" + name.replace(".", "_")
            operation["security"] = []
    return result
