"""What people's pages read of agents' webhook endpoints and their deliveries."""

from __future__ import annotations

from django.db.models import F

from webhooks.models import DeliveryAttempt, WebhookEndpoint
from workspaces.models import Agent


def agent_endpoints(agent: Agent) -> list[WebhookEndpoint]:
    """Working endpoints first, then disabled ones; newest first within each."""
    return list(agent.webhook_endpoints.order_by(F("disabled_at").desc(nulls_first=True), "-created_at"))


def recent_attempts(endpoint: WebhookEndpoint, *, limit: int) -> list[DeliveryAttempt]:
    """The endpoint's `limit` latest delivery attempts, newest first, with their events."""
    return list(
        DeliveryAttempt.objects.filter(delivery__endpoint=endpoint)
        .select_related("delivery__event")
        .order_by("-attempted_at", "-id")[:limit]
    )
