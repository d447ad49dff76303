"""A message's MIME structure is read within limits: parts walked, nesting depth and attachments stored.
Beyond them the message is still delivered, says what was left out, and its raw bytes keep everything;
the parse takes bounded time whatever the structure. Inbound subjects are one line."""

from __future__ import annotations

import logging
import smtplib
import threading
import time

import pytest
from django.db import connection, transaction

from inboxes.models import Attachment, InboundRaw, Message, Thread
from inboxes.parsing import RAW_MESSAGE_HINT, ParseLimits, parse_mail
from inboxes.services import inbound_parse, inbound_parse_pending
from tests.inboxes.helpers import address_of, mail
from tests.inboxes.test_smtp_listener import send
from tests.webhooks.helpers import wait_until

# Generous: on a shared two-core machine the bounded parse takes a fraction of a second.
PARSE_SECONDS_BOUND = 5.0


def many_attachments(to: str, count: int) -> bytes:
    """A plain-text body and `count` one-byte attachments (~100 bytes each on the wire)."""
    head = (
        f"From: Ana Lopez <ana@example.com>\r\nTo: {to}\r\nSubject: Many files\r\n"
        "Message-ID: <many@example.com>\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="B"\r\n\r\n'
        "--B\r\nContent-Type: text/plain\r\n\r\nSee attached.\r\n"
    )
    parts = "".join(
        "--B\r\nContent-Type: application/octet-stream\r\n"
        f'Content-Disposition: attachment; filename="f{i}.bin"\r\n\r\nx\r\n'
        for i in range(count)
    )
    return (head + parts + "--B--\r\n").encode()


def deeply_nested(to: str, depth: int) -> bytes:
    """Multiparts nested `depth` deep, a text part at the bottom."""
    opening = "".join(
        f'--b{level - 1}\r\nContent-Type: multipart/mixed; boundary="b{level}"\r\n\r\n'
        for level in range(1, depth)
    )
    closing = "".join(f"--b{level}--\r\n" for level in reversed(range(depth)))
    return (
        f"From: Ana Lopez <ana@example.com>\r\nTo: {to}\r\nSubject: Deep\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="b0"\r\n\r\n'
        f"{opening}--b{depth - 1}\r\nContent-Type: text/plain\r\n\r\nthe bottom\r\n{closing}"
    ).encode()


def send_raw(port: int, raw: bytes, to: str) -> InboundRaw:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.sendmail("ana@example.com", [to], raw)
    return wait_until(lambda: InboundRaw.objects.order_by("-pk").first(), timeout=5)


def timed_parse(raw: InboundRaw) -> tuple[list[Message], float]:
    """The parse as a worker runs it, and the seconds it took (logged with the CPU time)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    delivered = inbound_parse(raw.pk)
    seconds = time.perf_counter() - started
    logging.getLogger(__name__).warning(
        "inbound_parse of %s bytes: %.3f s, %.3f s CPU",
        len(raw.raw),
        seconds,
        time.process_time() - cpu_started,
    )
    return delivered, seconds


def test_it_stores_at_most_the_cap_of_a_3000_attachment_mail_and_tells_the_agent(sdr, smtp_port, settings):
    settings.INBOUND_MAX_ATTACHMENTS_PER_MESSAGE = 50
    settings.INBOUND_MAX_MIME_PARTS = 500
    address = address_of(sdr)
    raw = send_raw(smtp_port, many_attachments(address, 3000), address)

    (message,), seconds = timed_parse(raw)

    assert seconds < PARSE_SECONDS_BOUND
    assert Attachment.objects.filter(message=message).count() == 50
    assert message.text.strip() == "See attached."
    shown = sdr.client.get(f"/inbox/messages/{message.public_id}").json()
    assert [a["filename"] for a in shown["attachments"]] == [f"f{i}.bin" for i in range(50)]
    (note,) = [n for n in shown["notes"] if n.startswith("Attachments")]
    # The parser stops at the 500th part (the root, the text, 498 attachments): 448 beyond the 50 kept.
    assert note == f"Attachments beyond the first 50 were not stored (448 of them); {RAW_MESSAGE_HINT}."
    assert any(n.startswith("The message has more than 500 MIME parts") for n in shown["notes"])
    # Nothing lost: the message as received, every attachment in it, is still there.
    downloaded = sdr.client.get(f"/inbox/messages/{message.public_id}/raw")
    assert downloaded.status_code == 200 and downloaded.content == bytes(raw.raw)
    raw.refresh_from_db()
    assert raw.parsed_at is not None and note in raw.problem


def test_it_reads_only_the_first_parts_of_a_mail_with_too_many(sdr, smtp_port, settings):
    settings.INBOUND_MAX_MIME_PARTS = 20
    address = address_of(sdr)
    raw = send_raw(smtp_port, many_attachments(address, 3000), address)

    (message,), seconds = timed_parse(raw)

    assert seconds < PARSE_SECONDS_BOUND
    # The root, the text part and 18 attachments make 20 parts.
    assert Attachment.objects.filter(message=message).count() == 18
    assert any("more than 20 MIME parts" in note for note in message.notes)
    assert message.subject == "Many files" and message.text.strip() == "See attached."


def test_a_3000_deep_nested_multipart_is_delivered_in_bounded_time(sdr, smtp_port, settings):
    settings.INBOUND_MAX_MIME_DEPTH = 20
    address = address_of(sdr)
    raw = send_raw(smtp_port, deeply_nested(address, 3000), address)

    (message,), seconds = timed_parse(raw)

    assert seconds < PARSE_SECONDS_BOUND
    # Its headers are read (the whole message used to be unreadable), and the agent is told why the
    # body is missing.
    assert message.subject == "Deep"
    assert message.from_address == {"name": "Ana Lopez", "address": "ana@example.com"}
    assert any("nested more than 20 deep" in note for note in message.notes)
    shown = sdr.client.get(f"/inbox/messages/{message.public_id}").json()
    assert shown["notes"] == message.notes


def test_a_message_within_the_limits_has_no_notes(sdr, smtp_port):
    address = address_of(sdr)
    send(smtp_port, mail(address))
    (message,) = inbound_parse(InboundRaw.objects.get().pk)
    assert message.notes == []
    assert sdr.client.get(f"/inbox/messages/{message.public_id}").json()["notes"] == []


@pytest.mark.parametrize(
    "encoded",
    [
        "=?utf-8?q?Hello=0D=0ABcc:_boss@example.com?=",  # CR LF inside an encoded word
        "=?utf-8?b?SGVsbG8NCkJjYzogYm9zc0BleGFtcGxlLmNvbQ==?=",  # the same, base64
        "=?utf-8?q?Hello=0ABcc:_boss@example.com?=",  # a bare LF
        "Hello\r\n Bcc: boss@example.com",  # folded (RFC 5322 2.2.3): the CRLF goes, the space stays
    ],
)
def test_an_inbound_subject_is_one_line_in_the_message_and_its_thread(sdr, smtp_port, encoded):
    address = address_of(sdr)
    raw = f"From: ana@example.com\r\nTo: {address}\r\nSubject: {encoded}\r\n\r\nbody\r\n".encode()
    send_raw(smtp_port, raw, address)
    (message,) = inbound_parse(InboundRaw.objects.get().pk)

    assert message.subject == "Hello Bcc: boss@example.com"
    assert Thread.objects.get().subject == "Hello Bcc: boss@example.com"
    shown = sdr.client.get(f"/inbox/messages/{message.public_id}").json()
    assert shown["subject"] == "Hello Bcc: boss@example.com"
    thread = sdr.client.get(f"/inbox/threads/{message.thread.public_id}").json()
    assert thread["subject"] == "Hello Bcc: boss@example.com"


def test_other_control_characters_in_a_subject_become_spaces():
    raw = b"From: a@example.com\r\nSubject: =?utf-8?q?a=09b=0Bc=1Fd=7Fe=C2=85f?=\r\n\r\nbody\r\n"
    assert parse_mail(raw, max_attachment_bytes=10).subject == "a b c d e f"


def test_the_sweep_reports_rows_it_skipped_apart_from_those_it_parsed(sdr):
    # Two rows left unparsed by a crash; a worker is parsing the first one right now (holding its lock).
    first, second = (
        InboundRaw.objects.create(
            raw=mail(address_of(sdr)).as_bytes(),
            envelope_from="ana@example.com",
            envelope_to=[address_of(sdr)],
        )
        for _ in range(2)
    )
    locked, release = threading.Event(), threading.Event()

    def busy_worker() -> None:
        try:
            with transaction.atomic():
                InboundRaw.objects.select_for_update().get(pk=first.pk)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    worker = threading.Thread(target=busy_worker)
    worker.start()
    try:
        assert locked.wait(10)
        report = inbound_parse_pending()
    finally:
        release.set()
        worker.join()

    assert (report.parsed, report.skipped, report.failed) == (1, 1, 0)
    assert Message.objects.get().raw_id == second.pk
    assert inbound_parse_pending() == type(report)(parsed=1, skipped=0, failed=0)
    assert Message.objects.count() == 2


def test_an_agent_can_reply_to_a_3000_deep_nested_multipart(sdr, smtp_port):
    address = address_of(sdr)
    raw = deeply_nested(address, 3000).replace(b"Subject: Deep", b"Subject: Deep\r\nReply-To: bo@example.org")
    (message,) = inbound_parse(send_raw(smtp_port, raw, address).pk)

    response = sdr.client.post(f"/inbox/messages/{message.public_id}/reply", json={"text": "Got it."})

    assert response.status_code == 202, response.text
    reply = Message.objects.get(public_id=response.json()["id"])
    assert [a["address"] for a in reply.to] == ["bo@example.org"]
    assert reply.subject == "Re: Deep"


def test_forwarded_messages_nested_too_deep_are_read_down_to_the_limit():
    # message/rfc822 parts nest without any boundary: each body is a message of its own.
    raw = (
        b"From: ana@example.com\r\nSubject: Fwd\r\n"
        + b"Content-Type: message/rfc822\r\n\r\n" * 3000
        + b"hi\r\n"
    )
    started = time.process_time()
    parsed = parse_mail(
        raw, max_attachment_bytes=10, limits=ParseLimits(max_parts=500, max_depth=5, max_attachments=5)
    )
    assert time.process_time() - started < PARSE_SECONDS_BOUND
    assert parsed.subject == "Fwd"
    assert parsed.notes == [
        "The message's MIME parts are nested more than 5 deep: only what comes before was read; "
        "the raw message (/raw) has all of it."
    ]


def test_a_delivery_report_with_thousands_of_blocks_is_read_up_to_the_part_limit():
    raw = (
        b"From: mailer-daemon@example.com\r\nSubject: report\r\nContent-Type: message/delivery-status\r\n\r\n"
        + b"Action: failed\r\n\r\n" * 100_000
    )
    started = time.process_time()
    parsed = parse_mail(
        raw, max_attachment_bytes=10, limits=ParseLimits(max_parts=50, max_depth=5, max_attachments=5)
    )
    assert time.process_time() - started < PARSE_SECONDS_BOUND
    assert parsed.notes[0].startswith("The message has more than 50 MIME parts")


def test_an_invite_beyond_the_attachment_limit_is_still_read_but_not_stored():
    message = mail("sdr@acme.agentcal.localhost")
    message.add_attachment(b"first", maintype="application", subtype="pdf", filename="a.pdf")
    ics = b"BEGIN:VCALENDAR\r\nMETHOD:REQUEST\r\nBEGIN:VEVENT\r\nUID:u1\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    message.add_attachment(ics, maintype="text", subtype="calendar", filename="invite.ics")
    parsed = parse_mail(
        message.as_bytes(),
        max_attachment_bytes=1000,
        limits=ParseLimits(max_parts=50, max_depth=5, max_attachments=1),
    )
    assert [a.filename for a in parsed.attachments] == ["a.pdf"]
    assert parsed.calendar_parts == [ics]
    assert parsed.notes == [
        "Attachments beyond the first 1 were not stored (1 of them); the raw message (/raw) has all of it."
    ]
