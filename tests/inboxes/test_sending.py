"""An agent replies and sends over the API; a real Celery worker delivers through a real local SMTP sink
(the relay), or straight into another agent's inbox, and records what happened."""

from __future__ import annotations

import email
import email.policy
import smtplib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from audit.models import AuditRecord
from inboxes.models import InboundRaw, Message, MessageStatus
from inboxes.services import inbound_parse
from tests.inboxes.helpers import address_of, free_port, mail
from tests.webhooks.helpers import wait_until
from webhooks.models import OutboxEvent


@dataclass
class Sink:
    """The relay: records each message it accepts; refuses every recipient when `refuse` is set."""

    port: int
    refuse: str = ""
    received: list[tuple[list[str], email.message.EmailMessage]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # exactly the bytes of each accepted message
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:  # noqa: N802
        if self.refuse:
            return self.refuse
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.lock:
            self.received.append((list(envelope.rcpt_tos), parsed))
            self.raw.append(envelope.original_content)
        return "250 Message accepted"


@pytest.fixture
def sink(settings: Any) -> Iterator[Sink]:
    sink = Sink(port=free_port())
    controller = Controller(sink, hostname="127.0.0.1", port=sink.port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = sink.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_TIMEOUT = 5
    settings.INBOX_RELAY_CONFIGURED = True
    settings.INBOX_SEND_RETRY_SCHEDULE = [0, 0, 0, 0]
    yield sink
    controller.stop()


def received_from_ana(persona, **kwargs) -> Message:
    """A message for `persona` over real SMTP to the listener, parsed."""
    with smtplib.SMTP("127.0.0.1", kwargs.pop("port"), timeout=10) as client:
        client.send_message(mail(address_of(persona), **kwargs), from_addr="ana@example.com")
    raw = InboundRaw.objects.latest("pk")
    inbound_parse(raw.pk)  # the worker may be parsing it already: then this does nothing and we wait
    return wait_until(lambda: Message.objects.filter(raw=raw, agent=persona.agent).first())


def final_status(persona, message_id: str) -> dict[str, Any]:
    def settled() -> dict[str, Any] | None:
        shown = persona.client.get(f"/inbox/messages/{message_id}").json()
        return shown if shown["status"] != "queued" else None

    return wait_until(settled)


def queued(response) -> str:
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and body["id"].startswith("msg_")
    return body["id"]


@pytest.mark.slow
def test_a_reply_goes_through_the_relay_with_threading_headers(sdr, smtp_port, sink, celery_worker):
    parent = received_from_ana(
        sdr,
        port=smtp_port,
        message_id="first@example.com",
        References="<zero@example.com>",
        Cc="Bo <bo@example.org>",
    )
    response = sdr.client.post(f"/inbox/messages/{parent.public_id}/reply", json={"text": "Tuesday works."})
    reply_id = queued(response)

    shown = final_status(sdr, reply_id)
    assert shown["status"] == "sent", shown
    assert shown["sent_at"] is not None and shown["direction"] == "outbound"
    assert shown["thread_id"] == parent.thread.public_id

    ((envelope, sent),) = sink.received
    assert envelope == ["ana@example.com"]  # not reply_all: Bo is left out
    assert sent["From"].addresses[0].addr_spec == address_of(sdr)
    assert sent["To"] == "ana@example.com"
    assert sent["Subject"] == "Re: Meeting next week?"
    assert sent["In-Reply-To"] == "<first@example.com>"
    assert sent["References"] == "<zero@example.com> <first@example.com>"
    assert sent["Message-ID"] == f"<{shown['message_id']}>"
    assert shown["message_id"].endswith("@acme.agentcal.localhost")
    assert sent["Date"]
    assert sent.get_content().strip() == "Tuesday works."

    event = OutboxEvent.objects.get(event_type="message.sent")
    assert event.payload["message"]["id"] == reply_id
    audit = AuditRecord.objects.get(event_type="inbox.message.sent")
    assert audit.details["message"] == reply_id


@pytest.mark.slow
def test_reply_all_adds_the_other_recipients_but_not_the_agent(sdr, smtp_port, sink, celery_worker):
    parent = received_from_ana(sdr, port=smtp_port, subject="Re: Pricing", Cc="Bo <bo@example.org>")
    response = sdr.client.post(
        f"/inbox/messages/{parent.public_id}/reply", json={"text": "Noted.", "reply_all": True}
    )
    assert final_status(sdr, queued(response))["status"] == "sent"
    ((envelope, sent),) = sink.received
    assert sorted(envelope) == ["ana@example.com", "bo@example.org"]
    assert sent["Subject"] == "Re: Pricing"  # not "Re: Re:"
    assert address_of(sdr) not in envelope


@pytest.mark.slow
def test_a_message_to_another_agent_is_delivered_into_its_inbox_not_to_the_relay(
    sdr, exec_assistant, sink, celery_worker
):
    response = sdr.client.post(
        "/inbox/send",
        json={"to": [address_of(exec_assistant)], "subject": "Handover", "text": "Yours from here."},
    )
    sent_id = queued(response)
    assert final_status(sdr, sent_id)["status"] == "sent"
    assert sink.received == []

    (delivered,) = wait_until(lambda: list(Message.objects.filter(agent=exec_assistant.agent)))
    assert delivered.subject == "Handover"
    assert delivered.text.strip() == "Yours from here."
    assert delivered.from_address == {"name": sdr.agent.name, "address": address_of(sdr)}
    assert delivered.thread.agent_id == exec_assistant.agent.pk
    threads = exec_assistant.client.get("/inbox/threads").json()["results"]
    assert [t["id"] for t in threads] == [delivered.thread.public_id]


@pytest.mark.slow
def test_an_external_send_without_a_relay_is_marked_not_sent(sdr, settings, celery_worker):
    settings.INBOX_RELAY_CONFIGURED = False
    response = sdr.client.post(
        "/inbox/send", json={"to": ["ana@example.com"], "subject": "Hello", "text": "Hi."}
    )
    shown = final_status(sdr, queued(response))
    assert shown["status"] == "not_sent_no_relay"
    assert "ana@example.com" in shown["last_error"]
    assert not OutboxEvent.objects.filter(event_type="message.sent").exists()


@pytest.mark.slow
def test_a_relay_that_keeps_refusing_fails_the_message_after_five_attempts(sdr, sink, celery_worker):
    sink.refuse = "550 No such user here"
    response = sdr.client.post(
        "/inbox/send", json={"to": ["nobody@example.com"], "subject": "Hello", "text": "Hi."}
    )
    shown = final_status(sdr, queued(response))
    assert shown["status"] == "failed"
    assert shown["attempts"] == 5
    assert "550" in shown["last_error"]
    assert sink.received == []
    event = OutboxEvent.objects.get(event_type="message.failed")
    assert event.payload["message"]["id"] == shown["id"]
    audit = AuditRecord.objects.get(event_type="inbox.message.failed")
    assert audit.details["attempts"] == 5


@pytest.mark.parametrize(
    "body",
    [
        {"to": ["ana@example.com"], "subject": "Hi\r\nBcc: eve@example.net", "text": "x"},
        {"to": ["ana@example.com"], "subject": "Hi\n", "text": "x"},
        {"to": ["ana@example.com\r\nBcc: eve@example.net"], "subject": "Hi", "text": "x"},
        {"to": ["ana@example.com"], "cc": ["bo@example.org\n"], "subject": "Hi", "text": "x"},
        {"to": ["not an address"], "subject": "Hi", "text": "x"},
        {"to": [f"r{i}@example.com" for i in range(51)], "subject": "Hi", "text": "x"},
        {
            "to": [f"r{i}@example.com" for i in range(30)],
            "cc": [f"c{i}@example.com" for i in range(21)],
            "subject": "Hi",
            "text": "x",
        },
    ],
)
def test_header_injection_and_bad_recipients_are_refused_and_nothing_is_queued(sdr, body):
    response = sdr.client.post("/inbox/send", json=body)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert not Message.objects.exists()


def test_replying_to_another_agents_message_is_not_found(sdr, exec_assistant):
    from tests.inboxes.helpers import deliver_raw

    (theirs,) = deliver_raw(mail(address_of(exec_assistant)).as_bytes(), [address_of(exec_assistant)])
    response = sdr.client.post(f"/inbox/messages/{theirs.public_id}/reply", json={"text": "Mine now."})
    assert response.status_code == 404
    assert Message.objects.count() == 1


def test_a_key_without_inbox_send_is_refused(make_agent):
    reader = make_agent("reader", scopes=["inbox:read"])
    response = reader.client.post(
        "/inbox/send", json={"to": ["ana@example.com"], "subject": "Hi", "text": "x"}
    )
    assert response.status_code == 403
    assert not Message.objects.exists()


@pytest.mark.concurrency
def test_two_runs_of_one_delivery_hand_the_relay_the_message_once(sdr, sink):
    """A redelivered task, or two workers: the message's row lock makes the second run wait, then find
    it sent."""
    from django.db import connection as db

    from inboxes.delivery import message_deliver

    message_id = queued(
        sdr.client.post("/inbox/send", json={"to": ["ana@example.com"], "subject": "Hi", "text": "x"})
    )
    pk = Message.objects.get(public_id=message_id).pk
    results = []

    def run():
        try:
            results.append(message_deliver(pk))
        finally:
            db.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sink.received) == 1
    assert sorted(str(r) for r in results).count(str(MessageStatus.SENT)) == 1


def inbound_with_raw_subject(persona, encoded_subject: str) -> Message:
    """A message from Ana whose Subject header is exactly `encoded_subject` on the wire."""
    from tests.inboxes.helpers import deliver_raw

    raw = (
        f"From: Ana Lopez <ana@example.com>\r\nTo: {address_of(persona)}\r\nSubject: {encoded_subject}\r\n"
        "Message-ID: <lunch@example.com>\r\nContent-Type: text/plain\r\n\r\nLunch?\r\n"
    ).encode()
    (message,) = deliver_raw(raw, [address_of(persona)])
    return message


@pytest.mark.parametrize(
    ("encoded", "subject"),
    [
        # Encoded words decode to any character: here a vertical tab, a file separator, U+2028, then what
        # would be a header of its own, or a line that is no header at all.
        ("=?utf-8?q?Lunch=0BX-Evil:_1?=", "Re: Lunch X-Evil: 1"),
        ("=?utf-8?q?Lunch=1Cbroken_header_line?=", "Re: Lunch broken header line"),
        ("=?utf-8?q?Lunch=E2=80=A8X-Evil:_1?=", "Re: Lunch X-Evil: 1"),
    ],
)
def test_a_reply_to_a_subject_with_any_line_break_goes_out_on_one_header_line(sdr, sink, encoded, subject):
    from inboxes.delivery import message_deliver

    parent = inbound_with_raw_subject(sdr, encoded)
    reply_id = queued(sdr.client.post(f"/inbox/messages/{parent.public_id}/reply", json={"text": "Yes."}))
    reply = Message.objects.get(public_id=reply_id)
    assert reply.subject == subject

    assert message_deliver(reply.pk) == MessageStatus.SENT
    ((_, sent),) = sink.received
    assert sent["Subject"] == subject
    assert "X-Evil" not in sent
    headers = sink.raw[0].split(b"\r\n\r\n", 1)[0]
    assert not any(line.startswith((b"X-Evil", b"broken")) for line in headers.splitlines())


def test_an_agent_name_with_a_line_break_stays_in_the_from_header(sdr, sink):
    from inboxes.delivery import message_deliver
    from workspaces.models import Agent

    Agent.objects.filter(pk=sdr.agent.pk).update(name="Sales\x0bBcc: eve@example.net")
    message_id = queued(
        sdr.client.post("/inbox/send", json={"to": ["ana@example.com"], "subject": "Hi", "text": "x"})
    )
    assert message_deliver(Message.objects.get(public_id=message_id).pk) == MessageStatus.SENT

    ((envelope, sent),) = sink.received
    assert envelope == ["ana@example.com"]
    assert sent["From"].addresses[0].display_name == "Sales Bcc: eve@example.net"
    assert sent["From"].addresses[0].addr_spec == address_of(sdr)
    assert "Bcc" not in sent


@pytest.mark.parametrize("subject", ["Hi\x0bBcc: eve@example.net", "Hi\x1cX", "Hi\u2028X", "Hi\x85X"])
def test_a_subject_with_any_line_break_is_refused(sdr, subject):
    from agentcal.errors import InvalidRequest
    from inboxes.composing import message_send

    response = sdr.client.post(
        "/inbox/send", json={"to": ["ana@example.com"], "subject": subject, "text": "x"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["errors"]["subject"]
    # The same rule for a send that does not come through the API.
    with pytest.raises(InvalidRequest):
        message_send(agent=sdr.agent, to=["ana@example.com"], cc=[], subject=subject, text="x")
    assert not Message.objects.exists()


def test_a_message_that_cannot_be_built_fails_at_once_instead_of_staying_queued(sdr, sink):
    """Not the relay's refusal: an attempt that fails the same way every time (here an invite whose
    stored event cannot be written) marks the message failed, with the error, and nothing retries it."""
    from inboxes.delivery import messages_deliver_pending
    from inboxes.tasks import deliver

    message_id = queued(
        sdr.client.post("/inbox/send", json={"to": ["ana@example.com"], "subject": "Hi", "text": "x"})
    )
    message = Message.objects.get(public_id=message_id)
    unwritable = {
        "method": "REQUEST",
        "uid": "bk_gone@acme.agentcal.localhost",
        "sequence": 0,
        "start_time": "not a time",
        "end_time": "not a time",
        "summary": "Gone",
        "organizer": {"email": address_of(sdr), "name": ""},
        "attendees": [],
        "linked": None,
        "flag": None,
        "problem": None,
    }
    Message.objects.filter(pk=message.pk).update(invite_booking_id="bk_gone", calendar_event=unwritable)

    deliver.apply(args=(message.pk,))  # the task itself, run here

    shown = sdr.client.get(f"/inbox/messages/{message_id}").json()
    assert shown["status"] == "failed"
    assert shown["attempts"] == 1
    assert shown["last_error"].startswith("ValueError: Invalid isoformat string")
    assert sink.received == []
    event = OutboxEvent.objects.get(event_type="message.failed")
    assert event.payload["message"]["id"] == message_id
    assert AuditRecord.objects.filter(event_type="inbox.message.failed", details__message=message_id).exists()
    Message.objects.filter(pk=message.pk).update(next_attempt_at="2000-01-01T00:00:00Z")
    assert message.pk not in messages_deliver_pending()
