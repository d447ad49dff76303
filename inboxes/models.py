"""Agent inboxes: raw inbound mail as received, and the threads, messages and attachments parsed from it.

The flow: the SMTP listener (inboxes/smtp.py) stores each accepted message as one InboundRaw row before
it answers 250, so an accepted message is never lost; parsing (inboxes/services.py) turns the row into
one Message per recipient agent and marks it parsed in the same transaction, so it happens once.
"""

from __future__ import annotations

from functools import partial

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from agentcal.ids import new_public_id
from workspaces.models import Agent


class InboundRaw(models.Model):
    """One message exactly as the SMTP peer sent it. Only `parsed_at` and `problem` change afterwards."""

    raw = models.BinaryField()
    envelope_from = models.CharField(max_length=998, blank=True)
    # Only the recipients accepted at RCPT (each an existing agent's address), lowercased.
    envelope_to = ArrayField(models.CharField(max_length=320))
    peer_ip = models.GenericIPAddressField(null=True, blank=True)
    received_at = models.DateTimeField(db_default=Now())
    parsed_at = models.DateTimeField(null=True, blank=True)
    # What could not be read (MIME defects, undecodable parts); the message is still parsed as far as it goes.
    problem = models.TextField(blank=True)

    class Meta:
        indexes = [
            # The periodic catch-up: rows accepted but not yet parsed.
            models.Index(fields=["id"], condition=Q(parsed_at__isnull=True), name="inbound_raw_unparsed"),
        ]

    def __str__(self) -> str:
        return f"inbound #{self.pk} from {self.envelope_from}"


class Thread(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "thr"), editable=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=998, blank=True)
    # For threading a message without In-Reply-To/References: the same normalized subject from the same
    # counterpart (the address that started the thread) joins it.
    normalized_subject = models.CharField(max_length=998, blank=True)
    counterpart = models.CharField(max_length=320, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    last_message_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            models.Index(
                fields=["agent", "normalized_subject", "counterpart"], name="thread_subject_fallback"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Direction(models.TextChoices):
    INBOUND = "inbound"
    OUTBOUND = "outbound"


class MessageStatus(models.TextChoices):
    RECEIVED = "received"  # every inbound message
    QUEUED = "queued"  # outbound, waiting for (another) delivery attempt
    SENT = "sent"
    FAILED = "failed"  # the relay kept refusing it; no more attempts
    # External recipients and no relay configured: shown as such, never pretended sent.
    NOT_SENT_NO_RELAY = "not_sent_no_relay"
    # The agent's inbox is "review first": the draft waits for a person's approval (`approval_id`).
    AWAITING_APPROVAL = "awaiting_approval"
    DISCARDED = "discarded"  # the person denied it (or the approval expired): never sent


class Message(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "msg"), editable=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    # Null for outbound messages: they are built from their fields when delivered.
    raw = models.ForeignKey(InboundRaw, on_delete=models.PROTECT, related_name="messages", null=True)
    direction = models.CharField(max_length=16, choices=Direction.choices, default=Direction.INBOUND)
    status = models.CharField(max_length=32, choices=MessageStatus.choices, default=MessageStatus.RECEIVED)
    attempts = models.PositiveIntegerField(default=0)  # delivery attempts made (outbound)
    last_error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    message_id = models.CharField(max_length=998, blank=True)  # the Message-ID header, without <>
    in_reply_to = models.CharField(max_length=998, blank=True)
    references = models.JSONField(default=list)
    # Addresses as [{"name": ..., "address": ...}]; `from_address` is a single one (or null).
    from_address = models.JSONField(null=True)
    to = models.JSONField(default=list)
    cc = models.JSONField(default=list)
    subject = models.CharField(max_length=998, blank=True)
    text = models.TextField(blank=True)
    html = models.TextField(blank=True)  # as sent: it must be sanitised before anyone displays it
    reply_text = models.TextField(blank=True)  # `text` without the quoted history
    auth_results = models.JSONField(default=dict)  # {"spf": ..., "dkim": ..., "dmarc": ...}
    # Everything inbound comes from outside: agents must not follow instructions found in it.
    untrusted = models.BooleanField(default=True)
    received_at = models.DateTimeField()
    # Bytes this message takes in the agent's inbound storage (the raw message); 0 for outbound.
    size = models.PositiveBigIntegerField(default=0)
    # When the agent first fetched it through the API; null is "unread".
    read_at = models.DateTimeField(null=True, blank=True)
    # The approval a review-first send waits for.
    approval_id = models.CharField(max_length=32, null=True, blank=True)
    # An .ics invite in the message (inbound: parsed from it; outbound: attached from a booking):
    # {method, uid, sequence, start_time, end_time, organizer, attendees, linked, ...}.
    calendar_event = models.JSONField(null=True, blank=True)
    # Outbound: the booking whose invite is attached.
    invite_booking_id = models.CharField(max_length=32, null=True, blank=True)

    class Meta:
        constraints = [
            # Parsing a raw message twice must not deliver it twice to the same agent.
            models.UniqueConstraint(fields=["raw", "agent"], name="message_once_per_raw_and_agent"),
            # Inbound mail is only ever `received` and has its raw message; outbound never is, never has.
            models.CheckConstraint(
                condition=(
                    Q(direction=Direction.INBOUND, status=MessageStatus.RECEIVED, raw__isnull=False)
                    | (Q(direction=Direction.OUTBOUND, raw__isnull=True) & ~Q(status=MessageStatus.RECEIVED))
                ),
                name="message_status_matches_direction",
            ),
        ]
        indexes = [
            # Threading: which of the agent's messages does In-Reply-To/References name?
            models.Index(fields=["agent", "message_id"], name="message_agent_message_id"),
            models.Index(fields=["agent", "thread"], name="message_agent_thread"),
            # The sweep: outbound messages whose delivery task never ran.
            models.Index(fields=["id"], condition=Q(status="queued"), name="message_queued"),
            # Send quotas: the agent's outbound messages in a recent window.
            models.Index(
                fields=["agent", "received_at"],
                condition=Q(direction="outbound"),
                name="message_agent_outbound",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Attachment(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "att"), editable=False
    )
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachments")
    filename = models.CharField(max_length=500, blank=True)
    content_type = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    # Null when skipped (over INBOUND_MAX_ATTACHMENT_BYTES); the raw message still holds it.
    content = models.BinaryField(null=True)
    skipped = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.public_id
