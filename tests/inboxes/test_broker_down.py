"""With the broker down, inbound mail is still parsed (its task runs in the process that stored it) and an
outbound message stays queued for the delivery sweep: the tasks are enqueued by name, and each name's
fallback is the one that keeps the work."""

from __future__ import annotations

import logging
import smtplib

import pytest

from agentcal import broker
from inboxes.composing import message_send
from inboxes.delivery import messages_deliver_pending
from inboxes.models import Direction, InboundRaw, Message, MessageStatus
from tests.inboxes.helpers import address_of, mail
from tests.webhooks.helpers import wait_until
from tests.webhooks.test_broker_down import broker_switch  # noqa: F401 (fixture)


def test_mail_in_with_the_broker_down_is_parsed_by_the_listener(sdr, smtp_port, broker_switch):  # noqa: F811
    broker_switch.go_down()
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
        client.send_message(
            mail(address_of(sdr), message_id="while-down@example.com"), from_addr="ana@example.com"
        )

    # The broker refuses the parse task's message; the publisher thread runs the task itself. (Not
    # wait_idle: the message.received nudge that follows waits out the broker's back-off.)
    raw = wait_until(lambda: InboundRaw.objects.filter(parsed_at__isnull=False).first())
    assert broker.backing_off()
    message = Message.objects.get(raw=raw)
    assert (message.agent_id, message.direction, message.message_id) == (
        sdr.agent.pk,
        Direction.INBOUND,
        "while-down@example.com",
    )


@pytest.mark.usefixtures("transactional_db")
def test_a_send_with_the_broker_down_waits_for_the_sweep(sdr, broker_switch, settings, caplog):  # noqa: F811
    settings.INBOX_DELIVER_PENDING_SECONDS = 0
    broker_switch.go_down()
    with caplog.at_level(logging.WARNING, logger="inboxes.delivery"):
        message = message_send(agent=sdr.agent, to=["bob@example.com"], cc=[], subject="Tuesday", text="Hi")
        assert broker.wait_idle(timeout=20)

    assert f"could not enqueue delivery of message {message.pk}" in caplog.text
    message.refresh_from_db()
    assert (message.status, message.attempts) == (MessageStatus.QUEUED, 0)
    wait_until(lambda: message.pk in messages_deliver_pending())
