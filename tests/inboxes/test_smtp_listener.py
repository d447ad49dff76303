"""Mail over real SMTP (smtplib → the aiosmtpd listener) is stored before it is accepted, then parsed,
threaded and announced; what is not for one of our agents is refused at RCPT."""

from __future__ import annotations

import re
import smtplib
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from agentcal.rate_limits import MAX_BUCKETS, RateLimiter
from audit.models import AuditRecord
from inboxes.models import InboundRaw, Message, Thread
from inboxes.services import inbound_parse
from tests.inboxes.conftest import ListenerProcess, address_of, mail
from tests.webhooks.conftest import wait_until
from webhooks.models import OutboxEvent


def send(port: int, message, *, to: list[str] | None = None, sender: str = "ana@example.com") -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.send_message(message, from_addr=sender, to_addrs=to)


def unread_bytes(port: int) -> int:
    """Bytes that reached the listener's sockets on `port` but that it has not read yet (/proc/net/tcp)."""
    unread = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        _, local, _, state, queues, *_ = line.split()
        if int(local.rsplit(":", 1)[1], 16) == port and state == "01":  # ESTABLISHED
            unread += int(queues.split(":")[1], 16)
    return unread


def stored_raw() -> InboundRaw:
    return wait_until(lambda: InboundRaw.objects.first(), timeout=5)


def test_it_stores_a_message_raw_then_parses_it_into_the_agents_inbox(sdr, smtp_port):
    address = address_of(sdr)
    send(smtp_port, mail(address.upper(), message_id="first@example.com"))

    raw = InboundRaw.objects.get()  # committed before the 250 reached the client
    assert raw.envelope_to == [address]
    assert raw.envelope_from == "ana@example.com"
    assert raw.peer_ip == "127.0.0.1"
    assert b"Could we meet on Tuesday?" in bytes(raw.raw)

    (message,) = inbound_parse(raw.pk)
    raw.refresh_from_db()
    assert raw.parsed_at is not None and raw.problem == ""
    assert message.agent_id == sdr.agent.pk
    assert message.from_address == {"name": "Ana Lopez", "address": "ana@example.com"}
    assert message.subject == "Meeting next week?"
    assert message.text.strip() == "Could we meet on Tuesday?"
    assert message.message_id == "first@example.com"
    assert message.untrusted is True
    assert message.auth_results == {"spf": "none", "dkim": "none", "dmarc": "none"}

    event = OutboxEvent.objects.get(event_type="message.received")
    assert event.agent_id == sdr.agent.pk
    assert event.payload["message"]["id"] == message.public_id
    assert event.payload["message"]["thread_id"] == message.thread.public_id
    assert event.payload["message"]["untrusted"] is True
    audit = AuditRecord.objects.get(event_type="inbox.message.received")
    assert audit.workspace_id == sdr.agent.workspace_id
    assert audit.details["message"] == message.public_id


def test_a_reply_with_in_reply_to_lands_in_the_same_thread(sdr, smtp_port):
    address = address_of(sdr)
    send(smtp_port, mail(address, message_id="first@example.com"))
    (first,) = inbound_parse(InboundRaw.objects.get().pk)

    reply = mail(
        address,
        subject="Something else entirely",
        body="Tuesday works.\n\nOn Mon, 30 Nov 2026, SDR <sdr@acme> wrote:\n> Could we meet?\n",
        sender="Bo <bo@example.org>",
        message_id="second@example.org",
        in_reply_to="first@example.com",
    )
    send(smtp_port, reply, sender="bo@example.org")
    (second,) = inbound_parse(InboundRaw.objects.latest("pk").pk)

    assert second.thread_id == first.thread_id
    assert second.in_reply_to == "first@example.com"
    assert second.reply_text == "Tuesday works."
    assert Thread.objects.count() == 1


def test_the_same_subject_from_the_same_sender_joins_the_thread_but_another_sender_does_not(sdr, smtp_port):
    address = address_of(sdr)
    send(smtp_port, mail(address, subject="Pricing"))
    send(smtp_port, mail(address, subject="RE: Fwd: pricing"))
    send(smtp_port, mail(address, subject="Re: Pricing", sender="eve@example.net"), sender="eve@example.net")
    for raw in InboundRaw.objects.order_by("pk"):
        inbound_parse(raw.pk)
    first, second, third = Message.objects.order_by("pk")
    assert second.thread_id == first.thread_id
    assert third.thread_id != first.thread_id


def test_an_unknown_recipient_is_refused_at_rcpt_and_nothing_is_stored(sdr, smtp_port):
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        send(smtp_port, mail("nobody@acme.agentcal.localhost"))
    ((code, _),) = refused.value.recipients.values()
    assert code == 550
    assert not InboundRaw.objects.exists()
    audit = AuditRecord.objects.get(event_type="inbox.message.refused")
    assert audit.failure_reason == "unknown_recipient"
    assert audit.workspace_id == sdr.agent.workspace_id


def test_an_unknown_workspace_is_refused_and_audited_without_a_workspace(sdr, smtp_port):
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        send(smtp_port, mail("sdr@initech.agentcal.localhost"))
    assert not InboundRaw.objects.exists()
    assert AuditRecord.objects.get(event_type="inbox.message.refused").workspace_id is None


def test_a_foreign_domain_is_refused_as_relaying(sdr, smtp_port):
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        send(smtp_port, mail("someone@example.com"))
    ((code, response),) = refused.value.recipients.values()
    assert code == 550 and b"5.7.1" in response
    assert not InboundRaw.objects.exists()
    assert AuditRecord.objects.get(event_type="inbox.message.refused").failure_reason == "relay_denied"


def test_only_the_accepted_recipients_are_kept(sdr, exec_assistant, smtp_port):
    send(
        smtp_port,
        mail(address_of(sdr)),
        to=[address_of(sdr), "ghost@acme.agentcal.localhost", address_of(exec_assistant)],
    )
    raw = InboundRaw.objects.get()
    assert sorted(raw.envelope_to) == sorted([address_of(sdr), address_of(exec_assistant)])
    messages = inbound_parse(raw.pk)
    assert {m.agent_id for m in messages} == {sdr.agent.pk, exec_assistant.agent.pk}


def test_an_oversize_message_is_refused_with_552_and_nothing_is_stored(sdr, settings, start_listener):
    settings.INBOUND_MAX_MESSAGE_BYTES = 2048
    port = start_listener()
    with pytest.raises((smtplib.SMTPSenderRefused, smtplib.SMTPDataError)) as refused:
        send(port, mail(address_of(sdr), body="x" * 5000 + "\n"))
    assert refused.value.smtp_code == 552
    assert not InboundRaw.objects.exists()


def test_a_peer_over_its_rate_is_told_to_come_back_later(sdr, start_listener):
    port = start_listener(per_minute=2)
    send(port, mail(address_of(sdr)))
    send(port, mail(address_of(sdr)))
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        send(port, mail(address_of(sdr)))
    assert refused.value.smtp_code == 421
    assert InboundRaw.objects.count() == 2


def test_a_message_names_at_most_a_hundred_recipients_and_the_rest_are_not_looked_up(sdr, smtp_port):
    """Each RCPT costs a lookup, and a refused one an audit row: past a hundred (RFC 5321's minimum) the
    answer is 452 without either, and the client sends the rest in another transaction."""
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
        client.ehlo()
        client.mail("ana@example.com")
        answers = [client.rcpt(f"ghost{n}@acme.agentcal.localhost")[0] for n in range(100)]
        over = client.rcpt(address_of(sdr))
        client.rset()
        client.mail("ana@example.com")
        next_message = client.rcpt(address_of(sdr))

    assert answers == [550] * 100
    assert over == (452, b"4.5.3 Too many recipients")
    assert next_message[0] == 250
    assert AuditRecord.objects.filter(event_type="inbox.message.refused").count() == 100


def test_the_rate_limiter_forgets_buckets_that_have_refilled():
    """Its keys may come from clients (a webhook's workspace id from the URL): memory holds only the
    buckets in use."""
    limiter = RateLimiter(per_minute=60_000)  # a spent token is back within a millisecond
    for n in range(MAX_BUCKETS + 1):
        assert limiter.allow(f"key-{n}")
    time.sleep(0.01)

    assert limiter.allow("one more")
    assert len(limiter._buckets) == 1


@pytest.mark.slow
def test_message_received_reaches_a_webhook_signed_through_the_worker(
    sdr, smtp_port, receiver, celery_worker
):
    response = sdr.client.post("/webhook-endpoints", json={"url": receiver.url, "events": ["message.*"]})
    assert response.status_code == 201, response.text
    endpoint = response.json()

    send(smtp_port, mail(address_of(sdr)))

    (request,) = receiver.wait_for(1)
    payload = Webhook(endpoint["secret"]).verify(request.body, request.headers)
    assert payload["type"] == "message.received"
    message = Message.objects.get()  # parsed by the worker
    assert payload["data"]["message"] == {
        "id": message.public_id,
        "thread_id": message.thread.public_id,
        "from": {"name": "Ana Lopez", "address": "ana@example.com"},
        "subject": "Meeting next week?",
        "received_at": payload["data"]["message"]["received_at"],
        "untrusted": True,
    }
    assert InboundRaw.objects.get().parsed_at is not None


# Every session's DATA is 9 MiB (under INBOUND_MAX_MESSAGE_BYTES, 10 MiB), in lines of 1,000 bytes with
# their CRLF (RFC 5321's longest): the listener reads a line at a time, so longer lines send faster.
UNFINISHED_DATA = (b"x" * 998 + b"\r\n") * (9 * 1024 * 1024 // 1000)
FLOOD_SESSIONS = 100
# Sessions come from ten addresses, 127.0.0.2 to 127.0.0.11: all of 127.0.0.0/8 is this host.
FLOOD_PEERS = 10
MIB = 1024


def open_with_unfinished_data(listener: ListenerProcess, to: str, *, source_ip: str) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", listener.port, timeout=30, source_address=(source_ip, 0))
    client.ehlo("flood.example")
    client.mail("flood@example.com")
    assert client.rcpt(to)[0] == 250
    assert client.docmd("DATA")[0] == 354
    assert client.sock is not None
    client.sock.sendall(UNFINISHED_DATA)  # and never the final dot
    return client


@pytest.mark.slow
def test_a_hundred_sessions_holding_unfinished_data_keep_the_listeners_memory_flat(sdr, listener_process):
    """Unfinished DATA is spooled to disk past a small buffer: the listener's memory stays flat (within
    50 MB) while a hundred sessions each hold 9 MiB, the next session is told 421 at the greeting, and
    once they close a message is accepted as before."""
    listener = listener_process(INBOUND_SMTP_MAX_SESSIONS=FLOOD_SESSIONS, INBOUND_SMTP_MAX_SESSIONS_PER_IP=10)
    address = address_of(sdr)
    # A first message sets the listener up (its imports, a database connection, a thread pool).
    send(listener.port, mail(address, message_id="before@example.com"))
    baseline = listener.memory_kib()
    listener.reset_peak_memory()

    sessions = [
        open_with_unfinished_data(listener, address, source_ip=f"127.0.0.{2 + n % FLOOD_PEERS}")
        for n in range(FLOOD_SESSIONS)
    ]
    wait_until(lambda: unread_bytes(listener.port) == 0, timeout=30)
    holding, peak = listener.memory_kib(), listener.memory_kib("VmHWM")
    growth = (
        f"listener RSS {baseline / MIB:.0f} MiB, then +{(holding - baseline) / MIB:.1f} MiB holding "
        f"{FLOOD_SESSIONS} unfinished DATA (+{(peak - baseline) / MIB:.1f} MiB at the peak)"
    )
    print(growth)
    assert peak - baseline < 50 * MIB, growth

    with pytest.raises(smtplib.SMTPConnectError) as refused:
        smtplib.SMTP("127.0.0.1", listener.port, timeout=10, source_address=("127.0.0.12", 0))
    reply = refused.value.smtp_error
    assert refused.value.smtp_code == 421 and isinstance(reply, bytes), refused.value
    assert re.fullmatch(rb"4\.7\.0 \S+ Too many sessions, try again later", reply)

    for client in sessions:
        client.close()

    def accepted() -> bool:
        try:
            send(listener.port, mail(address, message_id="after@example.com"))
        except smtplib.SMTPConnectError:
            return False  # the listener has not seen every session close yet
        return True

    wait_until(accepted, timeout=10)
    closed = listener.memory_kib()
    print(f"+{(closed - baseline) / MIB:.1f} MiB once they closed")
    assert closed - baseline < 50 * MIB, f"{growth}, +{(closed - baseline) / MIB:.1f} MiB once they closed"
    assert [bytes(raw.raw).count(b"Message-ID") for raw in InboundRaw.objects.order_by("pk")] == [1, 1]
    assert b"<after@example.com>" in bytes(InboundRaw.objects.latest("pk").raw)
