"""Sending: an agent's reply or new message is stored as a queued outbound Message, then delivered by a
Celery task (inboxes.tasks.deliver) after commit.

Delivery splits the recipients. Addresses of this installation's agents are delivered straight into their
inboxes through the receiving path (an InboundRaw row, parsed like any other), once, on the first attempt.
Everything else goes through Django's email backend, the relay configured by the EMAIL_* settings; a
refusal or a network error is retried on INBOX_SEND_RETRY_SCHEDULE, then the message is marked failed.
Any other error (a message that cannot be written, a bug) would fail every time: it fails the message at
once (inboxes.tasks.deliver). Every header value written is one line (agentcal.text.is_one_line): refused
where an agent gives it, collapsed where we derive it (a reply's subject, a display name).
"""

from __future__ import annotations

import email.generator
import email.parser
import email.policy
import email.utils
import io
import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
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
from agentcal.clock import isoformat_z
from agentcal.errors import InvalidRequest, QuotaExceeded
from agentcal.text import is_one_line, one_line
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.addresses import agent_address, resolve_recipient, workspace_domain
from inboxes.bounces import Bounce
from inboxes.dkim import dkim_signed, signing_key
from inboxes.invites import invite_attach, invite_request, invite_sent
from inboxes.models import Direction, InboundRaw, Message, MessageStatus, Thread
from inboxes.parsing import normalize_subject
from inboxes.quotas import quota_claim
from inboxes.services import inbound_parse
from webhooks.models import EventType
from webhooks.outbox import outbox_emit
from workspaces.actor import Actor
from workspaces.models import Agent

logger = logging.getLogger(__name__)

MAX_RECIPIENTS = 50
PENDING_BATCH = 500
# The RFC 5322 addr-spec in its dot-atom form (quoted local parts and domain literals are not accepted).
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
ADDR_SPEC = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*@{_LABEL}(?:\.{_LABEL})+", re.ASCII)
NO_AUTH = {"spf": "none", "dkim": "none", "dmarc": "none"}


def header_safe(value: str) -> bool:
    """One line (agentcal.text.is_one_line): a header value with a line break in it could start a
    header of its own."""
    return is_one_line(value)


def valid_address(value: str) -> bool:
    return header_safe(value) and len(value) <= 320 and ADDR_SPEC.fullmatch(value) is not None


def _entries(addresses: Iterable[str]) -> list[dict[str, str]]:
    return [{"name": "", "address": a} for a in addresses]


def _unique(addresses: Iterable[str], *, without: str = "") -> list[str]:
    seen = {without.lower()} if without else set()
    result = []
    for address in addresses:
        if address and address.lower() not in seen:
            seen.add(address.lower())
            result.append(address)
    return result


def _check_recipients(addresses: list[str]) -> None:
    # `errors` names "recipients": the rule spans to and cc, and is more than a JSON Schema can state.
    if not addresses:
        raise InvalidRequest("The message has no recipient.", errors={"recipients": ["none given"]})
    if len(addresses) > MAX_RECIPIENTS:
        detail = f"At most {MAX_RECIPIENTS} recipients (to and cc together)."
        raise InvalidRequest(detail, errors={"recipients": [detail]})
    bad = [a for a in addresses if not valid_address(a)]
    if bad:
        raise InvalidRequest("Not an email address (RFC 5322 addr-spec).", errors={"recipients": bad[:5]})


def message_send(
    *,
    agent: Agent,
    to: list[str],
    cc: list[str],
    subject: str,
    text: str,
    html: str = "",
    actor: Actor | None = None,
    invite_booking_id: str | None = None,
) -> Message:
    """Queue a new message in a new thread (or, for a review-first agent, submit it for approval).
    Raises QuotaExceeded (audited) over one of the agent's quotas. With `invite_booking_id` it carries
    that booking's calendar invite (inboxes.invites; NotFound, BookingNotLive)."""
    _check_recipients([*to, *cc])
    if not header_safe(subject):
        raise InvalidRequest("The subject must be one line (no line breaks).")
    actor = actor or Actor(workspace=agent.workspace, agent=agent)
    with _quota_refusal_audited(actor), transaction.atomic(durable=True):
        invite = None
        if invite_booking_id is not None:
            invite = invite_request(
                agent=agent, booking_id=invite_booking_id, recipients=[*to, *cc], subject=subject
            )
        thread = Thread.objects.create(
            agent=agent,
            subject=subject,
            normalized_subject=normalize_subject(subject),
            counterpart=to[0].lower(),
        )
        message = _queue(
            agent=agent,
            thread=thread,
            to=to,
            cc=cc,
            subject=subject,
            text=text,
            html=html,
            parent=None,
            calendar_event=invite.event if invite else None,
            invite_booking_id=invite_booking_id,
        )
        if invite is not None:
            invite_sent(invite, message)
    return _review_if_asked(message, actor)


def message_reply(
    *,
    agent: Agent,
    parent: Message,
    text: str,
    html: str = "",
    reply_all: bool = False,
    actor: Actor | None = None,
) -> Message:
    """Queue a reply to `parent` (one of the agent's own messages) in the parent's thread (or, for a
    review-first agent, submit it for approval). Raises QuotaExceeded (audited) over a quota."""
    own = agent_address(agent)
    if parent.direction == Direction.OUTBOUND:
        to = [a["address"] for a in parent.to]
        cc = [a["address"] for a in parent.cc] if reply_all else []
    else:
        reply_to = _reply_to(parent)
        sender = parent.from_address["address"] if parent.from_address else ""
        to = reply_to or [sender]
        cc = [a["address"] for a in (*parent.to, *parent.cc)] if reply_all else []
    to = _unique(to, without=own)
    cc = _unique(cc, without=own)
    cc = [a for a in cc if a.lower() not in {t.lower() for t in to}]
    _check_recipients([*to, *cc])
    subject = parent.subject
    if not subject.lower().startswith("re:"):
        subject = f"Re: {subject}"
    # A stranger's subject may hold any line break the email package would write as a new header line
    # (\v, U+2028, ...): collapsed to one line, as it will be sent.
    subject = one_line(subject)
    actor = actor or Actor(workspace=agent.workspace, agent=agent)
    with _quota_refusal_audited(actor), transaction.atomic(durable=True):
        message = _queue(
            agent=agent,
            thread=parent.thread,
            to=to,
            cc=cc,
            subject=subject,
            text=text,
            html=html,
            parent=parent,
        )
    return _review_if_asked(message, actor)


@contextmanager
def _quota_refusal_audited(actor: Actor) -> Iterator[None]:
    """Audit a send refused over a quota, with which one, once its transaction has rolled back."""
    try:
        yield
    except QuotaExceeded as exc:
        with transaction.atomic():
            audit_record(
                event_type=AuditEvent.INBOX_MESSAGE_REJECTED,
                outcome=Outcome.REJECTED,
                actor=actor,
                http_status=exc.status,
                failure_reason=exc.code,
                details={
                    "agent": actor.agent_public_id,
                    "quota": exc.quota,
                    "limit": exc.limit,
                    "window_seconds": exc.window_seconds,
                    "retry_after": exc.retry_after_seconds,
                },
            )
        exc.audited = True
        raise


def _review_if_asked(message: Message, actor: Actor) -> Message:
    if message.status != MessageStatus.AWAITING_APPROVAL:
        return message
    from inboxes.review import review_request  # inboxes.review imports this module

    return review_request(message=message, actor=actor)


def _reply_to(parent: Message) -> list[str]:
    if parent.raw is None:
        return []
    # Its headers only: the whole of a stranger's MIME structure (thousands of parts, nested past Python's
    # recursion limit) is no business of a reply's.
    headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(bytes(parent.raw.raw))
    values = headers.get_all("Reply-To") or []
    return [address for _, address in email.utils.getaddresses([str(v) for v in values]) if address]


def _queue(
    *,
    agent: Agent,
    thread: Thread,
    to: list[str],
    cc: list[str],
    subject: str,
    text: str,
    html: str,
    parent: Message | None,
    calendar_event: dict[str, Any] | None = None,
    invite_booking_id: str | None = None,
) -> Message:
    # Serialises the agent's sends until this transaction ends; raises QuotaExceeded over a quota.
    admitted_at = quota_claim(agent=agent, recipients=[*to, *cc])
    review_first = agent.inbox_review_first
    # make_msgid returns "<...>"; we store ids without the brackets, as inbound parsing does.
    message_id = email.utils.make_msgid(domain=workspace_domain(agent.workspace)).strip("<>")
    references = [*parent.references, parent.message_id] if parent and parent.message_id else []
    message = Message.objects.create(
        agent=agent,
        thread=thread,
        raw=None,
        direction=Direction.OUTBOUND,
        # Review first: a draft that waits for a person's approval (inboxes.review), not delivered yet.
        status=MessageStatus.AWAITING_APPROVAL if review_first else MessageStatus.QUEUED,
        message_id=message_id,
        in_reply_to=parent.message_id if parent else "",
        references=references,
        from_address={"name": one_line(agent.name), "address": agent_address(agent)},
        to=_entries(to),
        cc=_entries(cc),
        subject=subject,
        text=text,
        html=html,
        reply_text=text,
        auth_results=NO_AUTH,
        untrusted=False,  # written by the agent itself
        # The database's time the quota admitted it: quotas count sends by it.
        received_at=admitted_at,
        next_attempt_at=admitted_at,
        calendar_event=calendar_event,
        invite_booking_id=invite_booking_id,
    )
    if review_first:
        from inboxes.review import review_check  # inboxes.review imports this module

        review_check(message)  # too large to review: refused, and this transaction rolls back
    Thread.objects.filter(pk=thread.pk).update(last_message_at=Now())
    audit_record(
        event_type=(
            AuditEvent.INBOX_MESSAGE_AWAITING_APPROVAL if review_first else AuditEvent.INBOX_MESSAGE_QUEUED
        ),
        outcome=Outcome.SUCCESS,
        actor=None,
        workspace_id=agent.workspace_id,
        details={
            "agent": agent.public_id,
            "message": message.public_id,
            "thread": thread.public_id,
            "recipients": len(to) + len(cc),
        },
    )
    if not review_first:
        transaction.on_commit(partial(enqueue_delivery, message.pk))
    return message


def enqueue_delivery(message_pk: int) -> None:
    from inboxes.tasks import deliver  # inboxes.tasks imports this module

    # With the broker down the message stays queued and the periodic deliver_pending picks it up.
    broker.enqueue(deliver, (message_pk,), fallback=partial(_left_for_sweep, message_pk))


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
        invite_attach(outgoing, message)
    outgoing.envelope = envelope
    return outgoing


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
        _finish(
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
            _finish(message, MessageStatus.SENT)
        return MessageStatus.SENT
    _finish(message, MessageStatus.SENT)
    return MessageStatus.SENT


def message_attempt_failed(message_pk: int, error: str) -> int | None:
    """Record a failed attempt. Returns the seconds until the next one (INBOX_SEND_RETRY_SCHEDULE, by the
    attempts made so far, so a retry restarted by the sweep continues the schedule); None when that was
    the last attempt: the message is then marked failed and that is announced."""
    message = Message.objects.select_related("agent", "thread").filter(pk=message_pk).first()
    if message is None or message.status != MessageStatus.QUEUED:
        return None
    schedule = settings.INBOX_SEND_RETRY_SCHEDULE
    if message.attempts > len(schedule):
        _finish(message, MessageStatus.FAILED, error=error)
        return None
    delay = schedule[max(message.attempts, 1) - 1]
    Message.objects.filter(pk=message.pk, status=MessageStatus.QUEUED).update(
        last_error=error[:2000], next_attempt_at=Now() + timedelta(seconds=delay)
    )
    return delay


def message_attempt_broken(message_pk: int, error: str) -> None:
    """An attempt failed for a reason other than the relay (the message cannot be built, a bug): trying
    again would fail the same way, so the message is marked failed now, with the error."""
    message = Message.objects.select_related("agent", "thread").filter(pk=message_pk).first()
    if message is not None:
        _finish(message, MessageStatus.FAILED, error=error)


def message_bounced(*, agent: Agent, bounce: Bounce) -> Message | None:
    """A bounce report came back for one of the agent's sent messages: mark it failed (once). Only when
    an address it reports failed was one the message was sent to: a report about other addresses (or
    made up to fail the message) says nothing about this one's delivery."""
    message = (
        Message.objects.select_related("agent", "thread")
        .filter(
            agent=agent,
            direction=Direction.OUTBOUND,
            message_id=bounce.original_message_id,
            status=MessageStatus.SENT,
        )
        .first()
    )
    if message is None:
        return None
    sent_to = {a["address"].lower() for a in (*message.to, *message.cc)}
    failed = [r for r in bounce.recipients if r.address.lower() in sent_to]
    if not failed:
        logger.info("bounce report for %s names none of its recipients; ignored", message.public_id)
        return None
    bounce = replace(bounce, recipients=failed)
    _finish(message, MessageStatus.FAILED, error=f"Bounced: {bounce.summary()}", bounce=bounce)
    return message


def _finish(
    message: Message, status: MessageStatus, *, error: str = "", bounce: Bounce | None = None
) -> None:
    """End a queued message's delivery (sent, failed, not sent), or fail a sent one that bounced."""
    with transaction.atomic():
        was = MessageStatus.SENT if bounce else MessageStatus.QUEUED
        n = Message.objects.filter(pk=message.pk, status=was).update(
            status=status,
            last_error=error[:2000],
            # A bounced message was handed to the relay: when, stays.
            sent_at=F("sent_at") if bounce else Now() if status == MessageStatus.SENT else None,
        )
        if n != 1:
            return  # someone else finished it first
        message.refresh_from_db(fields=["status", "sent_at", "attempts", "last_error"])
        payload: dict[str, Any] = {
            "id": message.public_id,
            "thread_id": message.thread.public_id,
            "to": message.to,
            "cc": message.cc,
            "subject": message.subject,
            "status": status.value,
        }
        details: dict[str, Any] = {
            "agent": message.agent.public_id,
            "message": message.public_id,
            "attempts": message.attempts,
        }
        if status == MessageStatus.SENT:
            assert message.sent_at is not None
            payload["sent_at"] = isoformat_z(message.sent_at)
            event, audit_event, outcome = (
                EventType.MESSAGE_SENT,
                AuditEvent.INBOX_MESSAGE_SENT,
                Outcome.SUCCESS,
            )
        else:
            payload["error"] = message.last_error
            if bounce:
                payload["bounced"] = details["bounced"] = [asdict(r) for r in bounce.recipients]
            event, audit_event, outcome = (
                EventType.MESSAGE_FAILED,
                AuditEvent.INBOX_MESSAGE_FAILED,
                Outcome.FAILED,
            )
        outbox_emit(
            event_type=event,
            workspace_id=message.agent.workspace_id,
            agent_id=message.agent_id,
            data={"message": payload},
        )
        audit_record(
            event_type=audit_event,
            outcome=outcome,
            actor=None,
            workspace_id=message.agent.workspace_id,
            failure_reason="" if status == MessageStatus.SENT else status.value,
            details=details,
        )


def messages_deliver_pending() -> list[int]:
    """Queued messages whose next attempt is overdue — their task was never published, or was lost with a
    worker or a broker — : their ids, to enqueue again."""
    overdue = timezone.now() - timedelta(seconds=settings.INBOX_DELIVER_PENDING_SECONDS)
    return list(
        Message.objects.filter(status=MessageStatus.QUEUED, next_attempt_at__lt=overdue)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:PENDING_BATCH]
    )
