"""How an outbound message's delivery ends: sent, failed (the relay refused it for good, the message
cannot be built, or a bounce report came back for it) or not sent (no relay). Each ending is one
conditional update from the status it ends, announced (message.sent, message.failed) and audited in the
same transaction; a refused attempt is given its next try here, or ended. Both the delivery side and the
inbound side (a bounce arriving) end messages here.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from agentcal.clock import isoformat_z
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.bounces import Bounce
from inboxes.models import Direction, Message, MessageStatus
from webhooks.models import EventType
from webhooks.outbox import outbox_emit
from workspaces.models import Agent

logger = logging.getLogger(__name__)


def message_attempt_failed(message_pk: int, error: str) -> int | None:
    """Record a failed attempt. Returns the seconds until the next one (INBOX_SEND_RETRY_SCHEDULE, by the
    attempts made so far, so a retry restarted by the sweep continues the schedule); None when that was
    the last attempt: the message is then marked failed and that is announced."""
    message = Message.objects.select_related("agent", "thread").filter(pk=message_pk).first()
    if message is None or message.status != MessageStatus.QUEUED:
        return None
    schedule = settings.INBOX_SEND_RETRY_SCHEDULE
    if message.attempts > len(schedule):
        message_finish(message, MessageStatus.FAILED, error=error)
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
        message_finish(message, MessageStatus.FAILED, error=error)


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
    message_finish(message, MessageStatus.FAILED, error=f"Bounced: {bounce.summary()}", bounce=bounce)
    return message


def message_finish(
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
