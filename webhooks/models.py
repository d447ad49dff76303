"""The transactional outbox and webhook delivery bookkeeping.

An OutboxEvent row is written in the same transaction as the state change it announces, so an event
exists exactly when its change committed: none for a rolled-back change, none lost if Redis or the
worker is down. The dispatcher turns each event into one WebhookDelivery per matching endpoint
(unique per event and endpoint), and each delivery records every attempt for the dashboard.
"""

from __future__ import annotations

from functools import partial

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from agentcal.event_patterns import matches
from agentcal.ids import new_public_id
from workspaces.models import Agent, Workspace


class EventType(models.TextChoices):
    HOLD_CREATED = "hold.created"
    HOLD_EXPIRED = "hold.expired"
    HOLD_EVICTED = "hold.evicted"
    HOLD_RELEASED = "hold.released"
    BOOKING_COMMITTED = "booking.committed"
    BOOKING_BUMPED = "booking.bumped"
    BOOKING_CANCELLED = "booking.cancelled"
    BOOKING_MOVED = "booking.moved"
    BOOKING_UPSTREAM_CONFLICT = "booking.upstream_conflict"
    BOOKING_ATTENDEE_RESPONDED = "booking.attendee_responded"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_APPROVED = "approval.approved"
    APPROVAL_DENIED = "approval.denied"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_CANCELLED = "approval.cancelled"
    MESSAGE_RECEIVED = "message.received"
    MESSAGE_SENT = "message.sent"
    MESSAGE_FAILED = "message.failed"
    CONNECTION_FAILED = "connection.failed"
    # The emergency stop: the agent (or its whole workspace) paused by an owner, and resumed.
    AGENT_PAUSED = "agent.paused"
    AGENT_RESUMED = "agent.resumed"
    WORKSPACE_PAUSED = "workspace.paused"
    WORKSPACE_RESUMED = "workspace.resumed"


class OutboxEvent(models.Model):
    # Also the Standard Webhooks `webhook-id`: the same on every attempt and replay, so receivers
    # deduplicate on it.
    public_id = models.CharField(max_length=32, default=partial(new_public_id, "evt"), editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    # The agent the event is for (the owner of the reservation it concerns); its endpoints get it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    event_type = models.CharField(max_length=64, choices=EventType.choices)
    payload = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())
    dispatched_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            # A constraint rather than unique=True: no varchar_pattern_ops copy to update on every write.
            models.UniqueConstraint(fields=["public_id"], name="outbox_public_id_unique"),
        ]
        indexes = [
            # The dispatcher's and catch-up's query: events not yet turned into deliveries.
            models.Index(fields=["id"], condition=Q(dispatched_at__isnull=True), name="outbox_undispatched"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.event_type}"


class WebhookEndpoint(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "whe"), editable=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2048)
    description = models.CharField(max_length=200, blank=True)
    # Exact event types or families such as "hold.*"; ["*"] for everything.
    events = ArrayField(models.CharField(max_length=64))
    # The whsec_… signing secret, sealed (agentcal.sealing): it must be read back to sign, so a hash
    # will not do, but a database dump alone must not be enough to sign events as us. Shown once at
    # creation, never returned again; webhooks.services.endpoint_signing_secret unseals it to sign.
    sealed_secret = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=200, blank=True)
    # Start of the current run of failures (cleared by any success): 5 days of it disables the endpoint.
    failing_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.public_id} {self.url}"

    def wants(self, event_type: str) -> bool:
        return any(pattern == "*" or matches(pattern, event_type) for pattern in self.events)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its next attempt
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # retries exhausted, or the endpoint answered 410 Gone
    CANCELLED = "cancelled"  # the endpoint was disabled or deleted before it succeeded


class WebhookDelivery(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "dlv"), editable=False
    )
    event = models.ForeignKey(OutboxEvent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, db_default=Now())
    # While an attempt is in flight the delivery is leased to one worker; an expired lease (a worker
    # that died mid-attempt) makes it due again.
    leased_until = models.DateTimeField(null=True)
    created_at = models.DateTimeField(db_default=Now())
    completed_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            # Exactly one delivery per event and endpoint, however often the dispatcher runs.
            models.UniqueConstraint(fields=["event", "endpoint"], name="delivery_one_per_event_endpoint"),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"], condition=Q(status="pending"), name="delivery_pending_due"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.status}"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempts")
    attempted_at = models.DateTimeField(db_default=Now())
    status_code = models.PositiveSmallIntegerField(null=True)
    latency_ms = models.PositiveIntegerField()
    response_excerpt = models.TextField(blank=True)
    error = models.CharField(max_length=300, blank=True)
    is_replay = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.delivery_id} {self.status_code or self.error}"
