"""Mail over real SMTP (smtplib → the aiosmtpd listener) is stored before it is accepted, then parsed,
threaded and announced; what is not for one of our agents is refused at RCPT."""

from __future__ import annotations

import re
import select
import smtplib
import socket
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from standardwebhooks import Webhook

from agentcal.rate_limits import MAX_BUCKETS, RateLimiter
from audit.models import AuditRecord
from inboxes.models import InboundRaw, Message, Thread
from inboxes.services import inbound_parse
from tests.inboxes.helpers import ListenerProcess, address_of, mail
from tests.webhooks.helpers import wait_until
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


def reply_text(error: smtplib.SMTPResponseException) -> bytes:
    assert isinstance(error.smtp_error, bytes), error
    return error.smtp_error


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
UNFINISHED_DATA_LINES = 9 * 1024 * 1024 // 1000
FLOOD_SESSIONS = 100
# Sessions come from ten addresses, 127.0.0.2 to 127.0.0.11: all of 127.0.0.0/8 is this host.
FLOOD_PEERS = 10
KIB_PER_MIB = 1024
FLAT_KIB = 50_000_000 // 1024  # 50 MB, in the KiB that /proc counts in


def open_with_unfinished_data(
    listener: ListenerProcess, to: str, data: bytes, *, source_ip: str
) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", listener.port, timeout=30, source_address=(source_ip, 0))
    client.ehlo("flood.example")
    client.mail("flood@example.com")
    assert client.rcpt(to)[0] == 250
    assert client.docmd("DATA")[0] == 354
    assert client.sock is not None
    client.sock.sendall(data)  # and never the final dot
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

    data = (b"x" * 998 + b"\r\n") * UNFINISHED_DATA_LINES
    sessions = [
        open_with_unfinished_data(listener, address, data, source_ip=f"127.0.0.{2 + n % FLOOD_PEERS}")
        for n in range(FLOOD_SESSIONS)
    ]
    wait_until(lambda: unread_bytes(listener.port) == 0, timeout=30)
    holding, peak = listener.memory_kib(), listener.memory_kib("VmHWM")
    growth = (
        f"listener RSS {baseline / KIB_PER_MIB:.0f} MiB, then +{(holding - baseline) / KIB_PER_MIB:.1f} MiB "
        f"holding {FLOOD_SESSIONS} unfinished DATA (+{(peak - baseline) / KIB_PER_MIB:.1f} MiB at the peak)"
    )
    assert peak - baseline < FLAT_KIB, growth
    assert listener.spool_files() == FLOOD_SESSIONS  # their DATA is on disk

    with pytest.raises(smtplib.SMTPConnectError) as refused:
        smtplib.SMTP("127.0.0.1", listener.port, timeout=10, source_address=("127.0.0.12", 0))
    assert refused.value.smtp_code == 421
    assert re.fullmatch(rb"4\.7\.0 \S+ Too many sessions, try again later", reply_text(refused.value))

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
    growth += f", +{(closed - baseline) / KIB_PER_MIB:.1f} MiB once they closed"
    print(growth)
    assert closed - baseline < FLAT_KIB, growth
    assert listener.spool_files() == 0
    before, after = (bytes(raw.raw) for raw in InboundRaw.objects.order_by("pk"))
    assert b"<before@example.com>" in before and b"<after@example.com>" in after


def closed_sessions(reason: str) -> float:
    """The in-process listener's counter of sessions it closed itself."""
    value = REGISTRY.get_sample_value("agentcal_inbound_smtp_sessions_closed_total", {"reason": reason})
    return value or 0.0


def test_sessions_past_the_limits_are_told_421_at_the_greeting(settings, start_listener):
    settings.INBOUND_SMTP_MAX_SESSIONS = 3
    settings.INBOUND_SMTP_MAX_SESSIONS_PER_IP = 2
    port = start_listener()
    before = {reason: closed_sessions(reason) for reason in ("over_sessions", "over_sessions_per_ip")}

    def session_from(ip: str) -> smtplib.SMTP:
        return smtplib.SMTP("127.0.0.1", port, timeout=10, source_address=(ip, 0))

    first, second = session_from("127.0.0.1"), session_from("127.0.0.1")
    with pytest.raises(smtplib.SMTPConnectError) as over_per_ip:
        session_from("127.0.0.1")
    third = session_from("127.0.0.2")
    with pytest.raises(smtplib.SMTPConnectError) as over_all:
        session_from("127.0.0.3")
    first.quit()
    again = session_from("127.0.0.1")  # a session that ended gave its place back

    assert over_per_ip.value.smtp_code == over_all.value.smtp_code == 421
    assert re.fullmatch(
        rb"4\.7\.0 \S+ Too many sessions from your address, try again later", reply_text(over_per_ip.value)
    )
    assert re.fullmatch(rb"4\.7\.0 \S+ Too many sessions, try again later", reply_text(over_all.value))
    assert closed_sessions("over_sessions_per_ip") == before["over_sessions_per_ip"] + 1
    assert closed_sessions("over_sessions") == before["over_sessions"] + 1
    for client in (second, third, again):
        assert client.noop()[0] == 250
        client.quit()


def test_an_idle_session_is_told_421_and_closed_after_the_idle_timeout(sdr, settings, start_listener):
    settings.INBOUND_SMTP_IDLE_TIMEOUT_SECONDS = 1
    settings.INBOUND_SMTP_MAX_SESSIONS = 1
    port = start_listener()
    idle_before = closed_sessions("idle")

    with socket.create_connection(("127.0.0.1", port), timeout=10) as idle, idle.makefile("rb") as replies:
        started = time.monotonic()
        greeting = replies.readline()
        goodbye = replies.readline()
        end = replies.readline()
        idled = time.monotonic() - started
    send(port, mail(address_of(sdr)))  # the only session there may be: the idle one gave it back

    assert greeting.startswith(b"220 ")
    assert re.fullmatch(rb"421 4\.4\.2 \S+ Idle too long, closing\r\n", goodbye)
    assert end == b""  # closed
    assert 1 <= idled < 5
    assert closed_sessions("idle") == idle_before + 1
    assert InboundRaw.objects.count() == 1


def test_a_session_trickling_its_data_is_closed_at_the_session_deadline_and_nothing_is_stored(
    sdr, settings, start_listener
):
    """A line of DATA every 0.3 s is never a second idle, but the session ends at its deadline all the
    same: a client cannot hold a session for ever by sending slowly."""
    settings.INBOUND_SMTP_IDLE_TIMEOUT_SECONDS = 1
    settings.INBOUND_SMTP_MAX_SESSION_SECONDS = 2
    port = start_listener()
    deadline_before = closed_sessions("too_long")

    # From before the connection: the server's deadline runs from when it accepted it.
    started = time.monotonic()
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.ehlo()
        client.mail("ana@example.com")
        client.rcpt(address_of(sdr))
        assert client.docmd("DATA")[0] == 354
        assert client.sock is not None
        while not select.select([client.sock], [], [], 0.3)[0] and time.monotonic() - started < 10:
            client.sock.sendall(b"Still typing.\r\n")
        lasted = time.monotonic() - started
        code, reply = client.getreply()

    assert code == 421 and re.fullmatch(rb"4\.4\.2 \S+ Session too long, closing", reply)
    assert 2 <= lasted < 5
    assert closed_sessions("too_long") == deadline_before + 1
    assert not InboundRaw.objects.exists()


def test_data_past_the_memory_buffer_is_stored_exactly_as_sent(sdr, smtp_port):
    """DATA past 256 KiB goes to a temporary file; what is stored is the message as sent, dot-unstuffed
    (RFC 5321 §4.5.2): lines of a lone dot or starting with one, 998-octet lines, 8-bit bytes, CRLFs."""
    address = address_of(sdr)
    raw = (
        f"From: Ana <ana@example.com>\r\nTo: {address}\r\nSubject: Minutes\r\n\r\n".encode()
        + b".\r\n..two dots\r\n.one dot\r\n\xe9t\xe9 \xff\r\n"
        + b"".join(b"." + f"{n:06d}".encode() + b"x" * 991 + b"\r\n" for n in range(400))
        + b"The end.\r\n"
    )
    assert len(raw) > 256 * 1024
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
        client.sendmail("ana@example.com", [address], raw)

    assert bytes(InboundRaw.objects.get().raw) == raw


@pytest.mark.parametrize("length", [1000, 100_000])
def test_a_line_longer_than_rfc_5321_allows_is_refused_with_500_and_the_session_goes_on(
    sdr, smtp_port, length
):
    """998 octets and CRLF, and one more for a stuffed dot, is the longest line (RFC 5321 §4.5.3.1.6): a
    longer one is refused once DATA ends, and the next message on the session is taken."""
    address = address_of(sdr)
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.sendmail("ana@example.com", [address], b"Subject: long\r\n\r\n" + b"y" * length + b"\r\n")
        client.sendmail("ana@example.com", [address], b"Subject: short\r\n\r\nFine.\r\n")

    assert refused.value.smtp_code == 500
    assert bytes(InboundRaw.objects.get().raw) == b"Subject: short\r\n\r\nFine.\r\n"
