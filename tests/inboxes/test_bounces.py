"""A relay accepting a message is not delivery: a bounce report (RFC 3464) that comes back to the agent's
address for one of its sent messages marks that message failed and says why — when it came as reports
do, with a null envelope sender, and names a recipient of that message. Anything else that looks like a
report fails nothing."""

from __future__ import annotations

import smtplib

import pytest

from audit.models import AuditRecord
from inboxes.bounces import bounce_in
from inboxes.models import Message
from tests.inboxes.helpers import address_of, deliver_raw
from tests.inboxes.test_sending import final_status, queued, sink  # noqa: F401 (fixture)
from webhooks.models import OutboxEvent


def delivery_report(
    *,
    to: str,
    original_id: str,
    action: str = "failed",
    status: str = "5.1.1",
    failed: tuple[str, ...] = ("nobody@example.com",),
) -> bytes:
    """A non-delivery report as Postfix writes it (headers abridged), one block per failed address."""
    blocks = "".join(
        f"""
Final-Recipient: rfc822; {address}
Original-Recipient: rfc822;{address}
Action: {action}
Status: {status}
Remote-MTA: dns; mx.example.com
Diagnostic-Code: smtp; 550 5.1.1 <{address}>: Recipient address
    rejected: User unknown in local recipient table
"""
        for address in failed
    )
    return f"""\
From: MAILER-DAEMON@mx.example.com (Mail Delivery System)
To: {to}
Subject: Undelivered Mail Returned to Sender
Message-ID: <20261201101500.4F1C2@mx.example.com>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
\tboundary="4F1C2.1764583700/mx.example.com"

--4F1C2.1764583700/mx.example.com
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients.

<nobody@example.com>: host mx.example.com said: 550 5.1.1 <nobody@example.com>:
    Recipient address rejected: User unknown in local recipient table

--4F1C2.1764583700/mx.example.com
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.com
Arrival-Date: Tue,  1 Dec 2026 10:15:00 +0000 (UTC)
{blocks}
--4F1C2.1764583700/mx.example.com
Content-Description: Undelivered Message Headers
Content-Type: text/rfc822-headers

From: Sales <sdr@acme.agentcal.localhost>
To: nobody@example.com
Subject: Tuesday
Message-ID: <{original_id}>

--4F1C2.1764583700/mx.example.com--
""".replace("\n", "\r\n").encode()


@pytest.mark.slow
def test_a_bounce_for_a_sent_message_marks_it_failed_with_the_reason(sdr, sink, celery_worker):  # noqa: F811
    sent_id = queued(
        sdr.client.post(
            "/inbox/send", json={"to": ["nobody@example.com"], "subject": "Tuesday", "text": "Hi"}
        )
    )
    assert final_status(sdr, sent_id)["status"] == "sent"
    sent = Message.objects.get(public_id=sent_id)

    (report,) = deliver_raw(
        delivery_report(to=address_of(sdr), original_id=sent.message_id),
        [address_of(sdr)],
        sender="",
    )
    assert report.subject == "Undelivered Mail Returned to Sender"  # the report is in the inbox too

    shown = sdr.client.get(f"/inbox/messages/{sent_id}").json()
    assert shown["status"] == "failed"
    assert shown["sent_at"] is not None  # it did leave
    assert "nobody@example.com: 5.1.1" in shown["last_error"]
    event = OutboxEvent.objects.get(event_type="message.failed")
    assert event.payload["message"]["id"] == sent_id
    (failed,) = event.payload["message"]["bounced"]
    assert failed["address"] == "nobody@example.com" and failed["status"] == "5.1.1"
    assert "User unknown" in failed["diagnostic"]
    assert (
        AuditRecord.objects.filter(event_type="inbox.message.failed", details__message=sent_id).count() == 1
    )

    # The same report again (a duplicate, a retry) changes nothing more.
    deliver_raw(
        delivery_report(to=address_of(sdr), original_id=sent.message_id), [address_of(sdr)], sender=""
    )
    assert OutboxEvent.objects.filter(event_type="message.failed").count() == 1


def test_only_a_failure_report_naming_the_original_is_a_bounce() -> None:
    bounce = bounce_in(delivery_report(to="a@b.c", original_id="x@acme"))
    assert bounce is not None and bounce.original_message_id == "x@acme"
    assert (
        bounce_in(delivery_report(to="a@b.c", original_id="x@acme", action="delayed", status="4.4.1")) is None
    )
    assert bounce_in(b"From: ana@example.com\r\nSubject: Undelivered Mail\r\n\r\nnot a report\r\n") is None
    assert bounce_in(b"Content-Type: multipart/report; report-type=delivery-status\r\n\r\n\x00\xff") is None


def sent_message(persona, sink) -> Message:  # noqa: F811
    """A message to nobody@ and bo@, handed to the relay (the sink)."""
    from inboxes.delivery import message_deliver

    message_id = queued(
        persona.client.post(
            "/inbox/send",
            json={"to": ["nobody@example.com"], "cc": ["bo@example.org"], "subject": "Tuesday", "text": "Hi"},
        )
    )
    message = Message.objects.get(public_id=message_id)
    message_deliver(message.pk)
    message.refresh_from_db()
    assert message.status == "sent"
    return message


def test_a_report_over_smtp_with_a_null_sender_fails_the_message(sdr, sink, smtp_port):  # noqa: F811
    """`MAIL FROM:<>`, as every real report comes: what the listener records for it counts as null."""
    from inboxes.models import InboundRaw
    from inboxes.services import inbound_parse

    sent = sent_message(sdr, sink)
    report = delivery_report(to=address_of(sdr), original_id=sent.message_id)
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
        client.sendmail("", [address_of(sdr)], report)
    inbound_parse(InboundRaw.objects.latest("pk").pk)

    sent.refresh_from_db()
    assert sent.status == "failed" and "nobody@example.com: 5.1.1" in sent.last_error


@pytest.mark.parametrize(
    ("envelope_sender", "failed"),
    [
        # Anyone the agent wrote to knows the Message-ID; a real report never has a sender to answer.
        ("eve@example.net", ("nobody@example.com",)),
        ("MAILER-DAEMON@mx.example.com", ("nobody@example.com",)),
        # A null sender, but about an address the message never went to.
        ("", ("someone-else@example.com",)),
    ],
)
def test_a_report_not_sent_as_reports_are_or_about_other_addresses_fails_nothing(
    sdr,
    sink,  # noqa: F811
    envelope_sender,
    failed,
):
    sent = sent_message(sdr, sink)
    (report,) = deliver_raw(
        delivery_report(to=address_of(sdr), original_id=sent.message_id, failed=failed),
        [address_of(sdr)],
        sender=envelope_sender,
    )

    assert report.subject == "Undelivered Mail Returned to Sender"  # still delivered, as mail
    sent.refresh_from_db()
    assert (sent.status, sent.last_error) == ("sent", "")
    assert not OutboxEvent.objects.filter(event_type="message.failed").exists()


def test_only_the_failed_recipients_of_the_message_are_reported(sdr, sink):  # noqa: F811
    sent = sent_message(sdr, sink)
    failed = ("someone-else@example.com", "Bo@Example.org")
    report = delivery_report(to=address_of(sdr), original_id=sent.message_id, failed=failed)
    deliver_raw(report, [address_of(sdr)], sender="")

    sent.refresh_from_db()
    assert sent.status == "failed"
    assert "someone-else" not in sent.last_error
    (event,) = OutboxEvent.objects.filter(event_type="message.failed")
    assert [r["address"] for r in event.payload["message"]["bounced"]] == ["Bo@Example.org"]
