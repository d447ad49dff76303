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
from workspaces.models import Agent, Workspace


class InboundRaw(models.Model):
    """One message exactly as the SMTP peer sent it. Only `parsed_at` and `problem` change afterwards."""

    raw = models.BinaryField()
    envelope_from = models.CharField(max_length=998, blank=True)
    # Only the recipients accepted at RCPT (each an existing agent's address), lowercased.
    envelope_to = ArrayField(models.CharField(max_length=320))
    peer_ip = models.GenericIPAddressField(null=True, blank=True)
    # Built by this installation's own local delivery (inboxes.delivery) from one of its agents' outbound
    # messages, never received from outside: its From header is the sending agent's, written by us. Only
    # that code path sets it; nothing in the bytes can.
    local_delivery = models.BooleanField(default=False)
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
    # The indexes below all lead with the agent: an index of the agent alone would only be one more way
    # to read an agent's whole history, which a planner without statistics takes for the cheapest.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    # Null for outbound messages: they are built from their fields when delivered.
    raw = models.ForeignKey(InboundRaw, on_delete=models.PROTECT, related_name="messages", null=True)
    direction = models.CharField(max_length=16, choices=Direction.choices, default=Direction.INBOUND)
    status = models.CharField(max_length=32, choices=MessageStatus.choices, default=MessageStatus.RECEIVED)
    attempts = models.PositiveIntegerField(default=0)  # delivery attempts made (outbound)
    # Queued outbound: when the next delivery attempt is due. Each attempt first pushes it past the time an
    # attempt may take, and a refusal to the retry's time, so a message whose task was lost (broker down,
    # worker killed mid-attempt, a retry dropped) is found by the periodic sweep once it is overdue.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
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
    # Inbound: what the parse left out under the limits on a message's structure (too many parts or
    # attachments, nested too deep), in words for the agent; the raw message holds all of it.
    notes = models.JSONField(default=list, blank=True)
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
            # The sweep: queued outbound messages whose next attempt is overdue.
            models.Index(fields=["next_attempt_at"], condition=Q(status="queued"), name="message_queued_due"),
            # The review repair (inboxes.review.reviews_repair): drafts held for review but never linked to
            # their approval, a handful at most among every message sent; by the repair's age bound, in the
            # repair's order (by id instead, the planner may walk the primary key through every message).
            models.Index(
                fields=["received_at", "id"],
                condition=Q(status="awaiting_approval", approval_id__isnull=True),
                name="message_review_unlinked",
            ),
            # Whether an invite ever left review (inboxes.invite_cancels.invite_ever_left): the messages that
            # carried one booking's invite, not the agent's whole history.
            models.Index(
                fields=["agent", "invite_booking_id"],
                condition=Q(invite_booking_id__isnull=False),
                name="message_agent_invite",
            ),
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
    # In the default storage (inboxes/attachments.py); empty when skipped (over
    # INBOUND_MAX_ATTACHMENT_BYTES): the raw message still holds it.
    file = models.FileField(max_length=255, blank=True)
    skipped = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.public_id


class InboundWebhookDelivery(models.Model):
    """A message accepted by the inbound-mail webhook, under the sender's `webhook-id`. Written in the
    transaction that stores the raw message, so a retried POST (the same id) finds this row and gets
    the same answer instead of storing the message twice."""

    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "inm"), editable=False
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    webhook_id = models.CharField(max_length=255)
    raw = models.OneToOneField(InboundRaw, on_delete=models.CASCADE, related_name="+")
    # The answer given: the recipients accepted and those refused (lowercased addresses).
    recipients = ArrayField(models.CharField(max_length=320))
    refused = ArrayField(models.CharField(max_length=320), default=list)
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # A sender's retry (or two racing copies of one POST) stores the message once: the second
            # INSERT waits for the first to commit, then fails and answers with the first's result.
            models.UniqueConstraint(fields=["workspace", "webhook_id"], name="inbound_webhook_once_per_id"),
        ]

    def __str__(self) -> str:
        return self.public_id


class BookingInvite(models.Model):
    """The calendar invite an agent sends for one of its bookings: one per booking (one UID), however often
    it is sent. It remembers what the attendees were last told, so a change bumps SEQUENCE; the sweeps send a
    CANCEL once the booking stops being committed (inboxes.invite_cancels), an update once it moved
    (inboxes.invite_updates)."""

    booking_id = models.CharField(max_length=32)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    uid = models.CharField(max_length=255)
    # RFC 5545 SEQUENCE of the last REQUEST or CANCEL sent: clients apply the highest they have seen.
    sequence = models.PositiveIntegerField(default=0)
    # What the last REQUEST said; a send that would say something else bumps `sequence`.
    start_time = models.DateTimeField()
    end_time = models.DateTimeField()
    summary = models.CharField(max_length=500)
    # Everyone the invite has gone to, as [{"email": ..., "name": ...}]: the CANCEL goes to all of them.
    attendees = models.JSONField(default=list)
    # The last message that carried it: the CANCEL answers it, in its thread.
    last_message = models.ForeignKey(
        "Message", on_delete=models.SET_NULL, null=True, related_name="+", db_index=False
    )
    created_at = models.DateTimeField(db_default=Now())
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # The CANCEL sweep leaves the invite alone until then: its CANCEL was refused over the agent's send
    # quota, and trying again at once would be refused again (and keep other agents' CANCELs waiting).
    next_try_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Two sends for one booking share the row (and so the UID and SEQUENCE).
            models.UniqueConstraint(fields=["booking_id"], name="booking_invite_once_per_booking"),
            # A REPLY finds its invite by UID.
            models.UniqueConstraint(fields=["uid"], name="booking_invite_uid_unique"),
        ]
        indexes = [
            # The sweeps (inboxes.invite_cancels, inboxes.invite_updates): open invites whose meeting, as
            # last told, has not ended. Every past meeting's invite stays open: by id they read them all.
            models.Index(
                fields=["end_time"], condition=Q(cancelled_at__isnull=True), name="booking_invite_open_until"
            ),
        ]

    def __str__(self) -> str:
        return self.uid


class PartStat(models.TextChoices):
    """An attendee's answer (RFC 5545 PARTSTAT), lowercased."""

    ACCEPTED = "accepted"
    DECLINED = "declined"
    TENTATIVE = "tentative"
    NEEDS_ACTION = "needs-action"
    DELEGATED = "delegated"


class InviteResponse(models.Model):
    """One attendee's REPLY to an invite, as received. `applied` is false when it was recorded but not
    believed (the sender was not that attendee, ...; `reason` says why): the booking was left alone."""

    invite = models.ForeignKey(BookingInvite, on_delete=models.CASCADE, related_name="responses")
    email = models.CharField(max_length=320)
    partstat = models.CharField(max_length=16, choices=PartStat.choices)
    sequence = models.PositiveIntegerField(default=0)
    applied = models.BooleanField()
    reason = models.CharField(max_length=64, blank=True)
    message = models.ForeignKey("Message", on_delete=models.CASCADE, related_name="+")
    responded_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index(fields=["invite", "email"], name="invite_response_attendee")]

    def __str__(self) -> str:
        return f"{self.email} {self.partstat}"
