"""Celery tasks: thin wrappers that take ids and call inboxes.services, .delivery, .outcomes,
.invite_cancels, .invite_updates and .review."""

from __future__ import annotations

import dataclasses
import logging
import smtplib

from celery import shared_task
from django.db import InterfaceError, OperationalError

from inboxes.delivery import message_deliver, messages_deliver_pending
from inboxes.invite_cancels import invites_cancel_ended
from inboxes.invite_updates import invites_update_moved
from inboxes.outcomes import message_attempt_broken, message_attempt_failed
from inboxes.review import reviews_repair
from inboxes.services import inbound_parse, inbound_parse_pending

logger = logging.getLogger(__name__)

# What the relay (or the way to it) may answer with: worth another attempt later.
RELAY_ERRORS = (smtplib.SMTPException, OSError)
# The database out of reach: nothing can be recorded now; the message stays queued for the sweep.
DATABASE_UNREACHABLE = (OperationalError, InterfaceError)


@shared_task(name="inboxes.parse_inbound", ignore_result=True)
def parse_inbound(raw_id: int) -> int:
    return len(inbound_parse(raw_id))


@shared_task(name="inboxes.parse_pending", ignore_result=True)
def parse_pending() -> dict[str, int]:
    """Periodic: parse raw messages that were accepted but never parsed; how many were parsed, skipped
    (another worker had them) and failed."""
    return dataclasses.asdict(inbound_parse_pending())


# No retry limit of Celery's own: message_attempt_failed ends the retries by the message's attempts.
@shared_task(name="inboxes.deliver", bind=True, ignore_result=True, max_retries=None)
def deliver(self: object, message_pk: int) -> None:
    try:
        message_deliver(message_pk)
    except RELAY_ERRORS as exc:
        # The message's attempts, not this task's retries, decide: the sweep may have restarted it.
        countdown = message_attempt_failed(message_pk, f"{type(exc).__name__}: {exc}")
        if countdown is not None:
            raise self.retry(exc=exc, countdown=countdown) from exc  # type: ignore[attr-defined]
    except DATABASE_UNREACHABLE:
        raise
    except Exception as exc:
        # Anything else (a message that cannot be built, a bug) fails the same way every time: retried,
        # or left queued for the sweep, it would be tried forever. It fails now, and says why.
        logger.exception("delivering message %s failed for good", message_pk)
        message_attempt_broken(message_pk, f"{type(exc).__name__}: {exc}")


@shared_task(name="inboxes.deliver_pending", ignore_result=True)
def deliver_pending() -> int:
    """Periodic: enqueue queued messages whose delivery is overdue (a task never published, or lost)."""
    pending = messages_deliver_pending()
    for message_pk in pending:
        deliver.delay(message_pk)
    return len(pending)


@shared_task(name="inboxes.cancel_ended_invites", ignore_result=True)
def cancel_ended_invites() -> int:
    """Periodic: send the CANCEL for invites whose booking is no longer committed."""
    return invites_cancel_ended()


@shared_task(name="inboxes.update_moved_invites", ignore_result=True)
def update_moved_invites() -> int:
    """Periodic: send the update (SEQUENCE + 1, the new times) for invites whose booking moved."""
    return invites_update_moved()


@shared_task(name="inboxes.repair_reviews", ignore_result=True)
def repair_reviews() -> int:
    """Periodic: review-first drafts a crash left without their approval."""
    return reviews_repair()
