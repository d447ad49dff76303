"""Delivery: one attempt at handing a queued outbound message over, run by the Celery task inboxes.deliver.

The recipients are split. Addresses of this installation's agents are delivered straight into their
inboxes through the receiving path (an InboundRaw row, parsed like any other), once, on the first attempt.
Everything else goes through Django's email backend, the relay configured by the EMAIL_* settings, built
here as MIME and DKIM-signed when a key is set; a refusal or a network error is retried on
INBOX_SEND_RETRY_SCHEDULE, then the message is failed (inboxes.outcomes). Any other error (a message
that cannot be written, a bug) would fail every time: it fails the message at once (inboxes.tasks.deliver).
"""

from __future__ import annotations

import email.generator
import email.utils
import io
import logging
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from agentcal import broker
from agentcal.text import one_line
from inboxes.addresses import agent_address, resolve_recipient, workspace_domain
from inboxes.dkim import dkim_signed, signing_key
from inboxes.ical import invite_ics
from inboxes.models import InboundRaw, Message, MessageStatus
from inboxes.outcomes import message_finish
from inboxes.services import inbound_parse

logger = logging.getLogger(__name__)

PENDING_BATCH = 500


def enqueue_delivery(message_pk: int) -> None:
    # With the broker down the message stays queued and the periodic deliver_pending picks it up.
    broker.enqueue("inboxes.deliver", (message_pk,), fallback=partial(_left_for_sweep, message_pk))


def _left_for_sweep(message_pk: int) -> None:
    logger.warning("could not enqueue delivery of message %s; the periodic sweep will send it", message_pk)


class _Outgoing(EmailMultiAlternatives):
    """Headers name every recipient; the envelope only the ones the relay is to deliver to. With
    `dkim_domain` set (and a key configured) the message is handed over DKIM-signed for that domain."""

    envelope: list[str]
    dkim_domain: str | None = None

    def recipients(self) -> list[str]:
        return list(self.envelope)

    def message(self, **kwargs: Any) -> Any:
        mime = super().message(**kwargs)
        key = signing_key()
        if self.dkim_domain is None or key is None:
            return mime
        buffer = io.BytesIO()
        email.generator.BytesGenerator(buffer, mangle_from_=False).flatten(mime, linesep="\r\n")
        return _Signed(dkim_signed(buffer.getvalue(), domain=self.dkim_domain, key=key))


class _Signed:
    """Signed bytes where Django's SMTP backend expects a MIME object: re-serializing the object could
    re-fold a header and break the signature, so the backend is handed exactly what was signed."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def as_bytes(self, linesep: str = "\r\n") -> bytes:
        return self.raw


def _build(message: Message, envelope: list[str]) -> _Outgoing:
    assert message.from_address is not None
    sender = message.from_address
    headers: dict[str, Any] = {
        "Message-ID": f"<{message.message_id}>",
        "Date": email.utils.format_datetime(message.received_at),
    }
    if message.in_reply_to:
        headers["In-Reply-To"] = f"<{message.in_reply_to}>"
    if message.references:
        headers["References"] = " ".join(f"<{r}>" for r in message.references)
    # Each is one line already when stored; made so again here, because a line break in a header value
    # makes the email package write a header line of its own or fail to write the message at all.
    outgoing = _Outgoing(
        subject=one_line(message.subject),
        body=message.text,
        from_email=email.utils.formataddr((one_line(sender["name"]), sender["address"])),
        to=[a["address"] for a in message.to],
        cc=[a["address"] for a in message.cc],
        headers=headers,
    )
    if message.html:
        outgoing.attach_alternative(message.html, "text/html")
    if message.invite_booking_id and message.calendar_event:
        _attach_invite(outgoing, message)
    outgoing.envelope = envelope
    return outgoing


def _attach_invite(outgoing: EmailMultiAlternatives, message: Message) -> None:
    """Add an outgoing message's invite: inline as `text/calendar; method=…` (what calendar clients act
    on) and as an `invite.ics` attachment (what the rest show)."""
    event = message.calendar_event
    assert event is not None
    ics = invite_ics(event, stamp=message.received_at)
    outgoing.attach_alternative(ics, f"text/calendar; method={event['method']}")
    outgoing.attach("invite.ics", ics, "application/ics")


def message_deliver(message_pk: int) -> MessageStatus | None:
    """One delivery attempt; returns the status it ended in, or None if the message was not queued (already
    handled). Raises the relay's error (smtplib.SMTPException, OSError) for the task to retry."""
    with transaction.atomic(durable=True):
        message = (
            Message.objects.select_for_update()
            .select_related("agent__workspace", "thread")
            .filter(pk=message_pk, status=MessageStatus.QUEUED)
            .first()
        )
        if message is None:
            return None
        # Until this attempt has ended (or is overdue: the worker died in it) the sweep leaves it alone.
        Message.objects.filter(pk=message.pk).update(
            attempts=F("attempts") + 1,
            next_attempt_at=Now() + timedelta(seconds=settings.INBOX_ATTEMPT_TIMEOUT_SECONDS),
        )
        attempts = message.attempts + 1
        recipients = [a["address"] for a in (*message.to, *message.cc)]
        local: list[str] = []
        external: list[str] = []
        for address in recipients:
            (local if resolve_recipient(address).agent is not None else external).append(address.lower())
        raw_id = None
        if local and attempts == 1:
            # Only on the first attempt, in the transaction that counts it: a retry for the relay's part
            # must not deliver to the local inboxes again.
            raw = _build(message, local).message().as_bytes()
            raw_id = InboundRaw.objects.create(
                raw=raw,
                envelope_from=agent_address(message.agent),
                envelope_to=sorted(set(local)),
                peer_ip=None,
                # Built here from the agent's own message: its From is the agent's, not a claim.
                local_delivery=True,
            ).pk
    if raw_id is not None:
        # If this fails the row stays unparsed and the periodic inbound_parse_pending delivers it.
        inbound_parse(raw_id)
    if external and not settings.INBOX_RELAY_CONFIGURED:
        message_finish(
            message, MessageStatus.NOT_SENT_NO_RELAY, error=f"No relay configured for {', '.join(external)}"
        )
        return MessageStatus.NOT_SENT_NO_RELAY
    if external:
        # The row stays locked while the relay is talked to, so a second run of this task (a redelivered
        # message, two workers) waits, then finds it sent: the relay is never handed it twice. Raises on
        # refusal: the task retries, and message_attempt_failed ends it.
        with transaction.atomic(durable=True):
            if (
                not Message.objects.select_for_update()
                .filter(pk=message.pk, status=MessageStatus.QUEUED)
                .exists()
            ):
                return None  # another run sent it meanwhile
            outgoing = _build(message, external)
            outgoing.dkim_domain = workspace_domain(message.agent.workspace)
            with get_connection(fail_silently=False) as connection:
                connection.send_messages([outgoing])
            message_finish(message, MessageStatus.SENT)
        return MessageStatus.SENT
    message_finish(message, MessageStatus.SENT)
    return MessageStatus.SENT


def messages_deliver_pending() -> list[int]:
    """Queued messages whose next attempt is overdue — their task was never published, or was lost with a
    worker or a broker — : their ids, to enqueue again."""
    overdue = timezone.now() - timedelta(seconds=settings.INBOX_DELIVER_PENDING_SECONDS)
    return list(
        Message.objects.filter(status=MessageStatus.QUEUED, next_attempt_at__lt=overdue)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:PENDING_BATCH]
    )
