"""Agent API for webhook endpoints, their deliveries and the agent's outbox."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import OutboundUrlField, StrictSerializer, validated
from agentcal.api.pagination import PageQuery
from agentcal.api.schema import page_of
from agentcal.api.views import AgentAPIView
from agentcal.errors import NotFound
from agentcal.event_patterns import matching
from agentcal.pagination import paginate
from webhooks import services
from webhooks.models import DeliveryStatus, EventType, OutboxEvent, WebhookDelivery, WebhookEndpoint
from workspaces.actor import Actor
from workspaces.models import Scope

_FAMILIES = sorted({value.split(".")[0] + ".*" for value in EventType.values})


# --- Serializers --------------------------------------------------------------------------------------


class EndpointInput(StrictSerializer):
    url = OutboundUrlField(max_length=2048)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=sorted({*EventType.values, *_FAMILIES, "*"})),
        min_length=1,
        max_length=50,
        help_text="Exact event types, a family such as `hold.*`, or `*` for all.",
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)

    def validate_events(self, events: list[str]) -> list[str]:
        known = {*EventType.values, *_FAMILIES, "*"}
        unknown = sorted(set(events) - known)
        if unknown:
            raise serializers.ValidationError(
                f"Unknown event type(s) {unknown}; use exact types, a family such as 'hold.*', or '*'."
            )
        return sorted(set(events))


class EndpointOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    url = serializers.CharField()
    description = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    status = serializers.SerializerMethodField()
    disabled_reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    disabled_at = serializers.DateTimeField(allow_null=True)
    failing_since = serializers.DateTimeField(allow_null=True)

    @extend_schema_field({"type": "string", "enum": ["active", "disabled"]})
    def get_status(self, endpoint: WebhookEndpoint) -> str:
        return "disabled" if endpoint.disabled_at else "active"


class EndpointCreatedOutput(EndpointOutput):
    secret = serializers.CharField(help_text="whsec_…: shown only in this response.")


class AttemptOutput(serializers.Serializer):
    attempted_at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField()
    response_excerpt = serializers.CharField()
    error = serializers.CharField()
    is_replay = serializers.BooleanField()


class DeliveryOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    endpoint_id = serializers.CharField(source="endpoint.public_id")
    event_id = serializers.CharField(source="event.public_id", help_text="Also the webhook-id header.")
    event_type = serializers.CharField(source="event.event_type")
    status = serializers.ChoiceField(choices=DeliveryStatus.choices)
    attempt_count = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True)


class DeliveryDetailOutput(DeliveryOutput):
    payload = serializers.JSONField(source="event.payload")
    attempts = AttemptOutput(many=True, source="attempts.all")


class EventDeliveryOutput(serializers.Serializer):
    id = serializers.CharField()
    endpoint_id = serializers.CharField()
    status = serializers.ChoiceField(choices=DeliveryStatus.choices)


class EventOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    type = serializers.CharField(source="event_type")
    created_at = serializers.DateTimeField()
    dispatched_at = serializers.DateTimeField(allow_null=True)
    # Named like Serializer.data: DRF moves declared fields into _declared_fields, so this works.
    data = serializers.JSONField(source="payload")  # type: ignore[assignment]
    deliveries = serializers.SerializerMethodField()

    @extend_schema_field(EventDeliveryOutput(many=True))
    def get_deliveries(self, event: OutboxEvent) -> list[dict[str, Any]]:
        return [
            {"id": d.public_id, "endpoint_id": d.endpoint.public_id, "status": d.status}
            for d in event.deliveries.all()
        ]


# --- Look-ups (another agent's objects are 404, like another workspace's) ---------------------------------


def _endpoint_for(actor: Actor, public_id: str) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.filter(agent=actor.agent, public_id=public_id).first()
    if endpoint is None:
        raise NotFound(f"No webhook endpoint {public_id} for this agent.")
    return endpoint


def _delivery_for(actor: Actor, public_id: str) -> WebhookDelivery:
    delivery = (
        WebhookDelivery.objects.select_related("event", "endpoint")
        .filter(endpoint__agent=actor.agent, public_id=public_id)
        .first()
    )
    if delivery is None:
        raise NotFound(f"No webhook delivery {public_id} for this agent.")
    return delivery


class DeliveryListQuery(PageQuery):
    status = serializers.ChoiceField(choices=DeliveryStatus.choices, required=False)


class EventListQuery(PageQuery):
    # The patterns a subscription takes (but `*`, which is no filter): an unknown type is refused, not
    # answered with an empty page an agent would read as "nothing happened".
    type = serializers.ChoiceField(
        choices=sorted({*EventType.values, *_FAMILIES}),
        required=False,
        help_text="Only events of this type, or of a family such as `hold.*`.",
    )


def _page(query: dict[str, Any], queryset: Any, *, scope: str) -> tuple[list[Any], str | None]:
    return paginate(
        queryset,
        cursor=query.get("cursor"),
        limit=query["limit"],
        descending=True,
        scope=scope,
        key_field="public_id",
    )


# --- Views ----------------------------------------------------------------------------------------------


class EndpointListView(AgentAPIView):
    summaries = {"GET": "List webhook endpoints", "POST": "Register a webhook endpoint"}
    operation_ids = {"GET": "list_webhook_endpoints", "POST": "create_webhook_endpoint"}
    required_scopes = {"GET": Scope.WEBHOOKS_WRITE, "POST": Scope.WEBHOOKS_WRITE}
    audit_action = "webhook.endpoint"

    @extend_schema(parameters=[PageQuery], responses={200: page_of(EndpointOutput)})
    def get(self, request: Request) -> Response:
        query = validated(PageQuery, request.query_params.dict())
        endpoints, next_cursor = _page(
            query, WebhookEndpoint.objects.filter(agent=self.actor.agent), scope="webhook-endpoints"
        )
        return Response({"results": EndpointOutput(endpoints, many=True).data, "next_cursor": next_cursor})

    @extend_schema(request=EndpointInput, responses={201: EndpointCreatedOutput})
    def post(self, request: Request) -> Response:
        data = validated(EndpointInput, request.data)
        endpoint, secret = services.endpoint_create(actor=self.actor, **data)
        # The secret in clear exists only here: the endpoint keeps it sealed.
        body = {**EndpointOutput(endpoint).data, "secret": secret}
        return Response(body, status=201, headers={"Location": f"/v1/webhook-endpoints/{endpoint.public_id}"})


class EndpointDetailView(AgentAPIView):
    summaries = {"GET": "Get a webhook endpoint", "DELETE": "Disable a webhook endpoint"}
    operation_ids = {"GET": "get_webhook_endpoint", "DELETE": "disable_webhook_endpoint"}
    required_scopes = {"GET": Scope.WEBHOOKS_WRITE, "DELETE": Scope.WEBHOOKS_WRITE}
    audit_action = "webhook.endpoint"

    @extend_schema(responses={200: EndpointOutput})
    def get(self, request: Request, endpoint_id: str) -> Response:
        return Response(EndpointOutput(_endpoint_for(self.actor, endpoint_id)).data)

    @extend_schema(request=None, responses={200: EndpointOutput})
    def delete(self, request: Request, endpoint_id: str) -> Response:
        """Disable the endpoint (kept, with its delivery history) and cancel its pending deliveries."""
        endpoint = _endpoint_for(self.actor, endpoint_id)
        services.endpoint_disable(endpoint, reason="deleted by the agent", actor=self.actor)
        return Response(EndpointOutput(endpoint).data)


class EndpointDeliveriesView(AgentAPIView):
    summaries = {"GET": "List an endpoint's deliveries"}
    operation_ids = {"GET": "list_webhook_deliveries"}
    required_scopes = {"GET": Scope.WEBHOOKS_WRITE}
    audit_action = "webhook.delivery"

    @extend_schema(parameters=[DeliveryListQuery], responses={200: page_of(DeliveryOutput)})
    def get(self, request: Request, endpoint_id: str) -> Response:
        endpoint = _endpoint_for(self.actor, endpoint_id)
        query = validated(DeliveryListQuery, request.query_params.dict())
        status = query.get("status")
        deliveries = WebhookDelivery.objects.filter(endpoint=endpoint).select_related("event", "endpoint")
        if status is not None:
            deliveries = deliveries.filter(status=status)
        page, next_cursor = _page(query, deliveries, scope=f"deliveries:{endpoint.public_id}:{status}")
        return Response({"results": DeliveryOutput(page, many=True).data, "next_cursor": next_cursor})


class DeliveryDetailView(AgentAPIView):
    summaries = {"GET": "Get a webhook delivery"}
    operation_ids = {"GET": "get_webhook_delivery"}
    required_scopes = {"GET": Scope.WEBHOOKS_WRITE}
    audit_action = "webhook.delivery"

    @extend_schema(responses={200: DeliveryDetailOutput})
    def get(self, request: Request, delivery_id: str) -> Response:
        return Response(DeliveryDetailOutput(_delivery_for(self.actor, delivery_id)).data)


class DeliveryReplayView(AgentAPIView):
    summaries = {"POST": "Send a webhook delivery again"}
    operation_ids = {"POST": "replay_webhook_delivery"}
    required_scopes = {"POST": Scope.WEBHOOKS_WRITE}
    audit_action = "webhook.delivery.replay"

    @extend_schema(request=None, responses={202: DeliveryOutput})
    def post(self, request: Request, delivery_id: str) -> Response:
        """Send the delivery once more (same webhook-id, current secret, no retries), in the background;
        a disabled endpoint is sent nothing (409 webhook_endpoint_disabled)."""
        delivery = _delivery_for(self.actor, delivery_id)
        services.delivery_replay_request(actor=self.actor, delivery=delivery)
        return Response(DeliveryOutput(delivery).data, status=202)


class EventListView(AgentAPIView):
    summaries = {"GET": "List the events addressed to the agent"}
    operation_ids = {"GET": "list_events"}
    required_scopes = {"GET": Scope.WEBHOOKS_WRITE}
    audit_action = "webhook.events"

    @extend_schema(parameters=[EventListQuery], responses={200: page_of(EventOutput)})
    def get(self, request: Request) -> Response:
        """The agent's outbox: every event addressed to it, newest first, with its deliveries."""
        query = validated(EventListQuery, request.query_params.dict())
        events = OutboxEvent.objects.filter(agent=self.actor.agent).prefetch_related("deliveries__endpoint")
        event_type = query.get("type")
        if event_type:
            events = events.filter(matching(event_type))
        page, next_cursor = _page(query, events, scope=f"events:{event_type}")
        return Response({"results": EventOutput(page, many=True).data, "next_cursor": next_cursor})
