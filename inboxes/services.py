"""Receiving mail: store what the SMTP listener accepted, then parse it into each recipient agent's inbox.

Storing and parsing are separate on purpose. The listener answers 250 only once the raw bytes are
committed (inbound_store); parsing runs after that, from Celery, and marks the raw row parsed in the
same transaction as the messages it creates (inbound_parse), so a crash in between loses nothing (the
periodic inbound_parse_pending finds the row) and a second run creates nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from agentcal import broker
from agentcal.clock import isoformat_z
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.addresses import resolve_recipient
from inboxes.attachments import attachments_store
from inboxes.bounces import bounce_in, null_sender
from inboxes.invites import invite_received
from inboxes.models import InboundRaw, Message, Thread
from inboxes.outcomes import message_bounced
from inboxes.parsing import ParsedMail, normalize_subject, parse_mail
from inboxes.quotas import storage_full
from inboxes.sender_auth import sender_authenticated
from webhooks.models import EventType
from webhooks.outbox import outbox_emit
from workspaces.models import Agent, Workspace

logger = logging.getLogger(__name__)

# A message without In-Reply-To/References joins a thread with the same subject from the same sender
# only if that thread has seen mail this recently.
SUBJECT_THREADING_WINDOW = timedelta(days=30)
PENDING_BATCH = 500


def inbound_store(
    *,
    raw: bytes,
    envelope_from: str,
    recipients: list[str],
    peer_ip: str | None,
    with_row: Callable[[InboundRaw], object] | None = None,
) -> int:
    """Commit the message as received and ask for it to be parsed; returns the raw row's id.

    `with_row` runs in the same transaction, given the new row: the inbound webhook records the
    sender's delivery id there, so the message and the proof it was accepted commit together."""
    with transaction.atomic(durable=True):
        row = InboundRaw.objects.create(
            raw=raw,
            envelope_from=envelope_from[:998],
            envelope_to=sorted({r.lower() for r in recipients}),
            peer_ip=peer_ip or None,
        )
        if with_row is not None:
            with_row(row)
        transaction.on_commit(partial(_enqueue_parse, row.pk))
    return row.pk


def _enqueue_parse(raw_id: int) -> None:
    # With the broker down the publisher thread parses it itself (the task, run here); if that fails too,
    # the periodic inbound_parse_pending still finds the row.
    broker.enqueue("inboxes.parse_inbound", (raw_id,), fallback=broker.RUN_HERE)


@dataclass(frozen=True)
class InboundRefusal:
    """Why a recipient was refused: `reason` for the audit row and API errors, `smtp_reply` for RCPT."""

    reason: str
    smtp_reply: str


def inbound_recipient_refusal(
    address: str, *, sender: str, peer: str, workspace: Workspace | None = None
) -> InboundRefusal | None:
    """None if mail for `address` may be accepted; otherwise why not, already audited.

    The one rule for both ways mail arrives (the SMTP listener at RCPT, the inbound webhook per
    recipient). `workspace`, when given, is the only workspace the mail may be for: the inbound webhook
    is signed with one workspace's secret and must not deliver into another's inboxes.
    """
    recipient = resolve_recipient(address)
    refusal: InboundRefusal | None = None
    if recipient.foreign or (workspace is not None and recipient.workspace != workspace):
        refusal = InboundRefusal(reason="relay_denied", smtp_reply="550 5.7.1 Relay access denied")
    elif recipient.agent is None:
        refusal = InboundRefusal(reason="unknown_recipient", smtp_reply="550 5.1.1 No such mailbox here")
    elif storage_full(recipient.agent):
        # A temporary refusal (4xx): the sender keeps the message and retries, and it lands once the
        # agent's stored mail is under its storage limit again (inboxes.quotas).
        refusal = InboundRefusal(reason="mailbox_full", smtp_reply="452 4.2.2 Mailbox full")
    if refusal is not None:
        inbound_refused(
            recipient=address,
            workspace=workspace or recipient.workspace,
            reason=refusal.reason,
            sender=sender,
            peer_ip=peer,
        )
    return refusal


def inbound_refused(
    *, recipient: str, workspace: Workspace | None, reason: str, sender: str, peer_ip: str
) -> None:
    """Audit a refused recipient (`unknown_recipient`, `relay_denied`, `mailbox_full`)."""
    audit_record(
        event_type=AuditEvent.INBOX_MESSAGE_REFUSED,
        outcome=Outcome.REJECTED,
        actor=None,
        workspace_id=workspace.pk if workspace else None,
        failure_reason=reason,
        details={"recipient": recipient[:320], "sender": sender[:320], "peer_ip": peer_ip},
    )


def inbound_parse(raw_id: int) -> list[Message]:
    """Parse one stored message into one Message per recipient agent. Does nothing if the row is already
    parsed or another worker is parsing it now."""
    return _parse_once(raw_id) or []


def _parse_once(raw_id: int) -> list[Message] | None:
    """inbound_parse, and None when it did nothing: the row is parsed already, or another worker holds it
    (an empty list is a row parsed for no agent, who all went away after RCPT)."""
    with transaction.atomic(durable=True):
        row = (
            InboundRaw.objects.select_for_update(skip_locked=True)
            .filter(pk=raw_id, parsed_at__isnull=True)
            .first()
        )
        if row is None:
            return None
        parsed = parse_mail(bytes(row.raw), max_attachment_bytes=settings.INBOUND_MAX_ATTACHMENT_BYTES)
        problems = list(parsed.problems)
        delivered: list[Message] = []
        seen: set[int] = set()
        for address in row.envelope_to:
            agent = resolve_recipient(address).agent
            if agent is None:
                # Accepted at RCPT, gone (deleted, deactivated) before parsing.
                problems.append(f"no agent for {address} any more")
                continue
            if agent.pk not in seen:
                seen.add(agent.pk)
                delivered.append(_deliver(agent=agent, row=row, parsed=parsed))
        InboundRaw.objects.filter(pk=row.pk).update(parsed_at=Now(), problem="\n".join(problems))
    if problems:
        logger.info("inbound message %s parsed with problems: %s", raw_id, "; ".join(problems))
    return delivered


@dataclass(frozen=True)
class ParseSweep:
    """What one run of inbound_parse_pending did with the rows it found unparsed."""

    parsed: int = 0
    skipped: int = 0  # parsed meanwhile by another worker, or being parsed by one now
    failed: int = 0  # the parse raised; the row stays unparsed for the next run


def inbound_parse_pending() -> ParseSweep:
    """Parse what was accepted but never parsed (a lost task, a crash)."""
    pending = list(
        InboundRaw.objects.filter(parsed_at__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)[:PENDING_BATCH]
    )
    parsed = skipped = failed = 0
    for raw_id in pending:
        try:
            delivered = _parse_once(raw_id)
        except Exception:  # one bad row must not hold up the rest; it is retried next time
            logger.exception("parsing inbound message %s failed", raw_id)
            failed += 1
            continue
        if delivered is None:
            skipped += 1
        else:
            parsed += 1
    sweep = ParseSweep(parsed=parsed, skipped=skipped, failed=failed)
    if pending:
        logger.info("inbound parse sweep: %s parsed, %s skipped, %s failed", parsed, skipped, failed)
    return sweep


def _deliver(*, agent: Agent, row: InboundRaw, parsed: ParsedMail) -> Message:
    thread = _thread_for(agent=agent, parsed=parsed, received_at=row.received_at)
    message = Message.objects.create(
        agent=agent,
        thread=thread,
        raw=row,
        message_id=parsed.message_id,
        in_reply_to=parsed.in_reply_to,
        references=parsed.references,
        from_address=parsed.from_address,
        to=parsed.to,
        cc=parsed.cc,
        subject=parsed.subject,
        text=parsed.text,
        html=parsed.html,
        reply_text=parsed.reply_text,
        auth_results=parsed.auth_results,
        notes=parsed.notes,
        untrusted=True,
        received_at=row.received_at,
        size=len(row.raw),
    )
    attachments_store(message, parsed.attachments)
    if thread.last_message_at < row.received_at:
        Thread.objects.filter(pk=thread.pk).update(last_message_at=row.received_at)
    sender = parsed.from_address["address"] if parsed.from_address else ""
    calendar_event = invite_received(
        agent=agent,
        message=message,
        invite=parsed.invite,
        sender_verified=parsed.invite is not None
        and sender_authenticated(raw=row, sender=sender, auth_results=parsed.auth_results),
    )
    announced = {
        "id": message.public_id,
        "thread_id": thread.public_id,
        "from": parsed.from_address,
        "subject": message.subject,
        "received_at": isoformat_z(row.received_at),
        "untrusted": True,
    }
    if calendar_event is not None:
        announced["calendar_event"] = calendar_event
    outbox_emit(
        event_type=EventType.MESSAGE_RECEIVED,
        workspace_id=agent.workspace_id,
        agent_id=agent.pk,
        data={"message": announced},
    )
    audit_record(
        event_type=AuditEvent.INBOX_MESSAGE_RECEIVED,
        outcome=Outcome.SUCCESS,
        actor=None,
        workspace_id=agent.workspace_id,
        details={
            "agent": agent.public_id,
            "message": message.public_id,
            "thread": thread.public_id,
            "from": sender,
        },
    )
    # Delivery status notifications come with a null envelope sender (RFC 5321 4.5.5, RFC 3464): only such
    # mail can fail one of the agent's sent messages.
    # (A report is a few parts: mail over the structure limits is not one, and is not parsed again whole.)
    bounce = bounce_in(bytes(row.raw)) if null_sender(row.envelope_from) and not parsed.notes else None
    if bounce is not None:
        message_bounced(agent=agent, bounce=bounce)
    return message


def _thread_for(*, agent: Agent, parsed: ParsedMail, received_at: datetime) -> Thread:
    """The thread the message answers (In-Reply-To/References), else a recent one with the same subject
    from the same sender, else a new one."""
    referenced = [i for i in (parsed.in_reply_to, *parsed.references) if i]
    if referenced:
        thread_id = (
            Message.objects.filter(agent=agent, message_id__in=referenced)
            .order_by("-pk")
            .values_list("thread_id", flat=True)
            .first()
        )
        if thread_id is not None:
            return Thread.objects.get(pk=thread_id)
    normalized = normalize_subject(parsed.subject)
    counterpart = parsed.from_address["address"] if parsed.from_address else ""
    if normalized and counterpart:
        thread = (
            Thread.objects.filter(
                agent=agent,
                normalized_subject=normalized,
                counterpart=counterpart,
                last_message_at__gte=received_at - SUBJECT_THREADING_WINDOW,
            )
            .order_by("-last_message_at")
            .first()
        )
        if thread is not None:
            return thread
    return Thread.objects.create(
        agent=agent,
        subject=parsed.subject,
        normalized_subject=normalized,
        counterpart=counterpart,
        last_message_at=received_at,
    )
