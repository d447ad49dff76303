"""Outbox → deliveries → attempts.

- `outbox_emit` is called inside the transaction of a state change; once that commits, a background
  thread nudges the dispatcher, and the periodic `webhooks.catch_up` finds what a lost nudge missed.
- `outbox_dispatch` claims undispatched events with SKIP LOCKED and creates one delivery per event and
  matching endpoint; the unique constraint makes a second dispatch of the same event a no-op.
- `delivery_attempt` leases a due delivery with a conditional UPDATE (one worker wins), sends it and
  records the attempt, then schedules the retry or settles the delivery.

The whole path: docs/architecture.md, "One hold, from HTTP to the database and out through the outbox".
"""

from __future__ import annotations

import json
import logging
import random
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from agentcal import broker
from agentcal.clock import isoformat_z
from agentcal.db import InsertBatch
from agentcal.ids import new_public_id
from agentcal.metrics import WEBHOOK_FAILURES, WEBHOOK_SECONDS
from agentcal.sealing import SealedSecretUnreadable
from webhooks.models import (
    DeliveryAttempt,
    DeliveryStatus,
    EventType,
    OutboxEvent,
    WebhookDelivery,
    WebhookEndpoint,
)
from webhooks.sender import AttemptResult, send_webhook
from webhooks.services import endpoint_disable, endpoint_signing_secret

logger = logging.getLogger(__name__)

DISPATCH_BATCH = 200
# How long one attempt may hold its lease: the request timeout plus slack.
LEASE_SLACK_SECONDS = 30


def outbox_emit(
    *,
    event_type: EventType,
    workspace_id: int,
    agent_id: int,
    data: dict[str, Any],
    batch: InsertBatch | None = None,
) -> None:
    """Record an event in the current transaction; it is dispatched only if that transaction commits.
    With `batch` the row goes out with the transaction's other queued INSERTs."""
    values = {
        "public_id": new_public_id("evt"),
        "workspace_id": workspace_id,
        "agent_id": agent_id,
        "event_type": str(event_type),
        "payload": data,
    }
    if batch is not None:
        batch.add(OutboxEvent, values)
    else:
        OutboxEvent.objects.create(**values)
    broker.nudge_on_commit("webhooks.dispatch_outbox")


def outbox_dispatch(limit: int = DISPATCH_BATCH) -> list[int]:
    """Turn undispatched events into deliveries; returns the ids of deliveries ready to send."""
    with transaction.atomic():
        events = list(
            OutboxEvent.objects.select_for_update(skip_locked=True)
            .filter(dispatched_at__isnull=True)
            .order_by("id")[:limit]
        )
        if not events:
            return []
        endpoints: dict[int, list[WebhookEndpoint]] = {}
        for endpoint in WebhookEndpoint.objects.filter(
            agent_id__in={e.agent_id for e in events}, disabled_at__isnull=True
        ):
            endpoints.setdefault(endpoint.agent_id, []).append(endpoint)
        WebhookDelivery.objects.bulk_create(
            [
                WebhookDelivery(event=event, endpoint=endpoint)
                for event in events
                for endpoint in endpoints.get(event.agent_id, [])
                if endpoint.wants(event.event_type)
            ],
            ignore_conflicts=True,
        )
        OutboxEvent.objects.filter(id__in=[e.id for e in events]).update(dispatched_at=Now())
        return list(
            WebhookDelivery.objects.filter(event__in=events, status=DeliveryStatus.PENDING).values_list(
                "id", flat=True
            )
        )


def deliveries_due(limit: int = 500) -> list[int]:
    """Pending deliveries whose next attempt is due and that no live worker holds."""
    return list(
        WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=Now())
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lt=Now()))
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )


def webhook_body(event: OutboxEvent) -> bytes:
    """The Standard Webhooks payload shape: {type, timestamp, data}."""
    envelope = {
        "id": event.public_id,
        "type": event.event_type,
        "timestamp": isoformat_z(event.created_at),
        "data": event.payload,
    }
    return json.dumps(envelope, separators=(",", ":"), sort_keys=True).encode()


# The attempt's error when the endpoint's sealed secret cannot be opened (the prefix is the metric's reason).
_UNREADABLE_WHY = "no configured key (SYNC_CREDENTIAL_KEYS) unseals this endpoint's signing secret"
SECRET_UNREADABLE = f"secret_unreadable: {_UNREADABLE_WHY}"


def _send(delivery: WebhookDelivery) -> AttemptResult:
    try:
        secret = endpoint_signing_secret(delivery.endpoint)
    except SealedSecretUnreadable:
        # Nothing is sent: a body signed with anything but the agent's secret would be refused by a
        # careful receiver and, worse, accepted by a careless one. The attempt is recorded (the agent
        # and the dashboard see why) and retried on the schedule, so putting the key back heals it.
        logger.error("webhook endpoint %s: %s", delivery.endpoint.public_id, _UNREADABLE_WHY)
        return AttemptResult(
            status_code=None,
            latency_ms=0,
            response_excerpt="",
            error=SECRET_UNREADABLE,
            retry_after_seconds=None,
        )
    # webhook-timestamp is the send time: receivers compare it with their clock to refuse replays.
    return send_webhook(
        url=delivery.endpoint.url,
        secret=secret,
        msg_id=delivery.event.public_id,
        timestamp=int(time.time()),
        body=webhook_body(delivery.event),
    )


def _record_attempt(delivery: WebhookDelivery, result: AttemptResult, *, is_replay: bool) -> None:
    DeliveryAttempt.objects.create(
        delivery=delivery,
        status_code=result.status_code,
        latency_ms=result.latency_ms,
        response_excerpt=result.response_excerpt,
        error=result.error[:300],
        is_replay=is_replay,
    )


def _lease(delivery_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE webhooks_webhookdelivery
               SET leased_until = now() + make_interval(secs => %s), attempt_count = attempt_count + 1
             WHERE id = %s AND status = %s AND next_attempt_at <= now()
               AND (leased_until IS NULL OR leased_until < now())
            """,
            [settings.WEBHOOK_TIMEOUT_SECONDS + LEASE_SLACK_SECONDS, delivery_id, DeliveryStatus.PENDING],
        )
        return cursor.rowcount == 1


def delivery_attempt(delivery_id: int) -> float | None:
    """Make one attempt if the delivery is due; returns the delay before a retry, if one is scheduled."""
    if not _lease(delivery_id):
        return None  # another worker has it, it is not due yet, or it is settled
    delivery = WebhookDelivery.objects.select_related("event", "endpoint__agent").get(pk=delivery_id)
    endpoint = delivery.endpoint
    if endpoint.disabled_at is not None:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            status=DeliveryStatus.CANCELLED, completed_at=Now()
        )
        return None
    result = _send(delivery)
    _observe(result)
    with transaction.atomic():
        _record_attempt(delivery, result, is_replay=False)
        if result.succeeded:
            _settle(delivery, DeliveryStatus.SUCCEEDED)
            WebhookEndpoint.objects.filter(pk=endpoint.pk).update(failing_since=None)
            return None
        WebhookEndpoint.objects.filter(pk=endpoint.pk, failing_since__isnull=True).update(failing_since=Now())
        if result.gone:
            _settle(delivery, DeliveryStatus.FAILED)
            endpoint_disable(endpoint, reason="the endpoint answered 410 Gone")
            return None
        if _failing_too_long(endpoint):
            _settle(delivery, DeliveryStatus.FAILED)
            days = settings.WEBHOOK_DISABLE_AFTER_SECONDS / 86400
            endpoint_disable(endpoint, reason=f"every delivery failed for {days:g} days")
            return None
        schedule = settings.WEBHOOK_RETRY_SCHEDULE
        if delivery.attempt_count >= len(schedule):
            _settle(delivery, DeliveryStatus.FAILED)
            return None
        delay = _retry_delay(schedule[delivery.attempt_count], result.retry_after_seconds)
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            next_attempt_at=Now() + timedelta(seconds=delay), leased_until=None
        )
    return delay


def _observe(result: AttemptResult) -> None:
    WEBHOOK_SECONDS.observe(result.latency_ms / 1000)
    if not result.succeeded:
        reason = f"http_{result.status_code // 100}xx" if result.status_code else result.error.split(":")[0]
        WEBHOOK_FAILURES.labels(reason or "unknown").inc()


def _retry_delay(scheduled: int, retry_after: int | None) -> float:
    # ±10% jitter so a receiver that comes back is not hit by every retry at the same instant;
    # Retry-After from the receiver is honoured when it asks for longer than the schedule.
    jittered = scheduled * random.uniform(0.9, 1.1)
    return max(jittered, float(retry_after or 0))


def _failing_too_long(endpoint: WebhookEndpoint) -> bool:
    limit = timedelta(seconds=settings.WEBHOOK_DISABLE_AFTER_SECONDS)
    return WebhookEndpoint.objects.filter(pk=endpoint.pk, failing_since__lte=Now() - limit).exists()


def _settle(delivery: WebhookDelivery, status: DeliveryStatus) -> None:
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=status, completed_at=Now(), leased_until=None, next_attempt_at=None
    )


def outbox_purge_old(*, batch: int = 5000) -> int:
    """Delete dispatched events (with their deliveries and attempts) past OUTBOX_RETENTION_DAYS.

    Every reservation change writes an event, so without this the table only grows. Events not yet
    dispatched, and deliveries still pending, are kept whatever their age.
    """
    cutoff = Now() - timedelta(days=settings.OUTBOX_RETENTION_DAYS)
    deleted = 0
    while True:
        ids = list(
            OutboxEvent.objects.filter(dispatched_at__lt=cutoff)
            .exclude(deliveries__status=DeliveryStatus.PENDING)
            .values_list("id", flat=True)[:batch]
        )
        if not ids:
            return deleted
        OutboxEvent.objects.filter(id__in=ids).delete()
        deleted += len(ids)


def delivery_replay(delivery_id: int) -> AttemptResult | None:
    """Send a delivery once more by hand: same webhook-id, the endpoint's current secret, no retries;
    nothing if the endpoint was disabled since the replay was asked for."""
    delivery = WebhookDelivery.objects.select_related("event", "endpoint").get(pk=delivery_id)
    if delivery.endpoint.disabled_at is not None:
        return None
    result = _send(delivery)
    with transaction.atomic():
        _record_attempt(delivery, result, is_replay=True)
        if result.succeeded and delivery.status != DeliveryStatus.SUCCEEDED:
            _settle(delivery, DeliveryStatus.SUCCEEDED)
    return result
