"""Celery tasks: thin wrappers that take ids and call inboxes.services and inboxes.sending."""

from __future__ import annotations

import smtplib

from celery import shared_task
from django.conf import settings

from inboxes.sending import message_attempt_failed, message_deliver, messages_deliver_pending
from inboxes.services import inbound_parse, inbound_parse_pending

# What the relay (or the way to it) may answer with: worth another attempt later.
RELAY_ERRORS = (smtplib.SMTPException, OSError)


@shared_task(name="inboxes.parse_inbound", ignore_result=True)
def parse_inbound(raw_id: int) -> int:
    return len(inbound_parse(raw_id))


@shared_task(name="inboxes.parse_pending", ignore_result=True)
def parse_pending() -> int:
    """Periodic: parse raw messages that were accepted but never parsed."""
    return inbound_parse_pending()


@shared_task(name="inboxes.deliver", bind=True, ignore_result=True)
def deliver(self: object, message_pk: int) -> None:
    try:
        message_deliver(message_pk)
    except RELAY_ERRORS as exc:
        schedule = settings.INBOX_SEND_RETRY_SCHEDULE
        retries = self.request.retries  # type: ignore[attr-defined]
        final = retries >= len(schedule)
        message_attempt_failed(message_pk, f"{type(exc).__name__}: {exc}", final=final)
        if not final:
            countdown = schedule[retries]
            raise self.retry(exc=exc, countdown=countdown, max_retries=len(schedule)) from exc  # type: ignore[attr-defined]


@shared_task(name="inboxes.deliver_pending", ignore_result=True)
def deliver_pending() -> int:
    """Periodic: enqueue queued messages whose delivery task was never published."""
    pending = messages_deliver_pending()
    for message_pk in pending:
        deliver.delay(message_pk)
    return len(pending)
