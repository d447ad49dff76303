"""Webhook endpoints and replays: the writes the agent API asks for, each audited in its transaction."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models.functions import Now

from agentcal import broker
from agentcal.errors import TooManyEndpoints, WebhookEndpointDisabled
from agentcal.sealing import Resealed, reseal_column, seal_secret, unseal_secret
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from webhooks.signing import new_signing_secret
from webhooks.url_guard import validate_webhook_url
from workspaces.actor import Actor

logger = logging.getLogger(__name__)

MAX_ENDPOINTS_PER_AGENT = 20


def endpoint_create(
    *, actor: Actor, url: str, events: list[str], description: str = ""
) -> tuple[WebhookEndpoint, str]:
    """Subscribe the agent to `events` at `url` (refused when the URL is not a public address, or
    the agent already has MAX_ENDPOINTS_PER_AGENT active endpoints). Returns the endpoint and its new
    signing secret in clear, the one time it is shown: only its sealed form is stored."""
    assert actor.agent is not None
    validate_webhook_url(url)
    secret = new_signing_secret()
    with transaction.atomic(durable=True):
        active = WebhookEndpoint.objects.filter(agent=actor.agent, disabled_at__isnull=True)
        if active.count() >= MAX_ENDPOINTS_PER_AGENT:
            raise TooManyEndpoints(f"At most {MAX_ENDPOINTS_PER_AGENT} active endpoints per agent.")
        endpoint = WebhookEndpoint.objects.create(
            agent=actor.agent,
            url=url,
            events=events,
            description=description,
            sealed_secret=seal_secret(secret),
        )
        audit_record(
            event_type=AuditEvent.WEBHOOK_ENDPOINT_CREATED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            details={"endpoint_id": endpoint.public_id, "url": endpoint.url, "events": endpoint.events},
        )
    return endpoint, secret


def endpoint_signing_secret(endpoint: WebhookEndpoint) -> str:
    """The endpoint's whsec_… secret, to sign with. Raises agentcal.sealing.SealedSecretUnreadable when
    no configured key unseals it: the caller must not sign with anything else."""
    return unseal_secret(endpoint.sealed_secret)


def endpoint_secrets_reseal() -> Resealed:
    """Every endpoint's signing secret sealed under the current first key (part of a key rotation:
    `manage.py sync --rotate-credentials`). The secrets themselves do not change."""
    return reseal_column(WebhookEndpoint.objects.all(), "sealed_secret")


def endpoint_disable(endpoint: WebhookEndpoint, *, reason: str, actor: Actor | None = None) -> bool:
    """Disable an endpoint and cancel its pending deliveries; audited. False if it already was."""
    with transaction.atomic():
        changed = WebhookEndpoint.objects.filter(pk=endpoint.pk, disabled_at__isnull=True).update(
            disabled_at=Now(), disabled_reason=reason[:200]
        )
        if not changed:
            return False
        WebhookDelivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.PENDING).update(
            status=DeliveryStatus.CANCELLED, completed_at=Now(), next_attempt_at=None
        )
        audit_record(
            event_type=AuditEvent.WEBHOOK_ENDPOINT_DISABLED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            workspace_id=endpoint.agent.workspace_id,
            details={"endpoint_id": endpoint.public_id, "url": endpoint.url, "reason": reason},
        )
    if actor is None:
        # Nobody asked for this: tell the owner. Until the dashboard's notifications exist, the
        # audit row above and this log line are where an operator sees it.
        logger.warning("webhook endpoint %s disabled: %s", endpoint.public_id, reason)
    endpoint.refresh_from_db(fields=["disabled_at", "disabled_reason"])
    return True


def delivery_replay_request(*, actor: Actor, delivery: WebhookDelivery) -> None:
    """Send a delivery once more (same webhook-id, current secret, no retries) from a worker, after the
    audit row commits; if the broker refuses the message, the publisher's thread sends it itself.
    Refused for a disabled endpoint: deleted by its agent, or gone (410) or failing for days, it is sent
    nothing more, by hand or not."""
    endpoint = delivery.endpoint
    if endpoint.disabled_at is not None:
        raise WebhookEndpointDisabled(
            f"Webhook endpoint {endpoint.public_id} is disabled ({endpoint.disabled_reason}); nothing is "
            "sent to it. Register an endpoint again; GET /v1/events lists the events it missed."
        )
    with transaction.atomic(durable=True):
        audit_record(
            event_type=AuditEvent.WEBHOOK_DELIVERY_REPLAYED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            details={"delivery_id": delivery.public_id, "event_id": delivery.event.public_id},
        )
        broker.enqueue_on_commit("webhooks.replay", (delivery.pk,), fallback=broker.RUN_HERE)
