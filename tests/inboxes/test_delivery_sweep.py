"""The periodic sweep finds queued messages whose delivery is overdue — a task never published, a retry lost
with its worker — and sends them, continuing the retry schedule where the message left it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from inboxes.delivery import messages_deliver_pending
from inboxes.models import Message, MessageStatus
from inboxes.outcomes import message_attempt_failed
from inboxes.tasks import deliver_pending
from tests.inboxes.test_sending import final_status, queued, sink  # noqa: F401 (fixture)


def send(persona) -> Message:
    response = persona.client.post(
        "/inbox/send", json={"to": ["ana@example.com"], "subject": "Tuesday", "text": "Does 10:00 work?"}
    )
    return Message.objects.get(public_id=queued(response))


@pytest.mark.slow
def test_a_retry_lost_with_its_worker_is_sent_by_the_sweep(sdr, sink, settings, celery_worker):  # noqa: F811
    settings.INBOX_RELAY_CONFIGURED = False  # the first attempt ends not sent; we stage the lost retry below
    message = send(sdr)
    assert final_status(sdr, message.public_id)["status"] == "not_sent_no_relay"  # its first attempt is over
    # As a relay refusal leaves it: one attempt made, the retry due in the past, and its Celery task gone.
    Message.objects.filter(pk=message.pk).update(
        status=MessageStatus.QUEUED,
        attempts=1,
        last_error="SMTPServerDisconnected",
        next_attempt_at=timezone.now() - timedelta(seconds=settings.INBOX_DELIVER_PENDING_SECONDS + 1),
    )
    settings.INBOX_RELAY_CONFIGURED = True

    assert deliver_pending() == 1  # here; the worker runs the delivery it enqueues
    shown = final_status(sdr, message.public_id)
    assert shown["status"] == "sent", shown
    assert len(sink.received) == 1
    message.refresh_from_db()
    assert message.attempts == 2  # the schedule continued; it did not start over


@pytest.mark.django_db
def test_the_sweep_leaves_alone_what_is_not_yet_overdue(sdr, settings):
    settings.INBOX_SEND_RETRY_SCHEDULE = [60, 300]
    message = send(sdr)
    now = timezone.now()
    grace = timedelta(seconds=settings.INBOX_DELIVER_PENDING_SECONDS)

    Message.objects.filter(pk=message.pk).update(next_attempt_at=now - grace / 2)
    assert messages_deliver_pending() == []  # its task may just be slow
    Message.objects.filter(pk=message.pk).update(next_attempt_at=now - grace * 2)
    assert messages_deliver_pending() == [message.pk]

    # An attempt in progress pushes it out by the attempt timeout; a refusal to the scheduled retry.
    Message.objects.filter(pk=message.pk).update(attempts=1)
    assert message_attempt_failed(message.pk, "SMTPDataError: 451") == 60
    message.refresh_from_db()
    assert message.next_attempt_at is not None
    assert message.next_attempt_at > now + timedelta(seconds=59)
    assert messages_deliver_pending() == []

    Message.objects.filter(pk=message.pk).update(attempts=2)
    assert message_attempt_failed(message.pk, "SMTPDataError: 451") == 300
    Message.objects.filter(pk=message.pk).update(attempts=3)
    assert message_attempt_failed(message.pk, "SMTPDataError: 550") is None  # the last attempt
    message.refresh_from_db()
    assert message.status == MessageStatus.FAILED
    assert messages_deliver_pending() == []
