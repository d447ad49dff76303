"""Parsing what arrived: quoted history, malformed MIME, attachments, a crash between accept and parse."""

from __future__ import annotations

from inboxes.models import Attachment, InboundRaw, Message
from inboxes.parsing import normalize_subject, parse_mail, strip_quoted_history
from inboxes.sender_auth import authentication_results
from inboxes.tasks import parse_pending
from tests.inboxes.helpers import address_of, deliver_raw, mail

GMAIL_REPLY = """Thanks, Tuesday at 10 works for us.

Best,
Bo

On Mon, Nov 30, 2026 at 9:14 AM Ana Lopez <ana@example.com>
wrote:

> Could we meet on Tuesday?
> > Earlier history
"""


def test_reply_text_drops_a_gmail_attribution_and_everything_after_it():
    assert strip_quoted_history(GMAIL_REPLY) == "Thanks, Tuesday at 10 works for us.\n\nBest,\nBo"


def test_reply_text_drops_quoted_lines_interleaved_with_answers():
    text = "> Tuesday?\nYes.\n> And the room?\nThe big one.\n"
    assert strip_quoted_history(text) == "Yes.\nThe big one."


def test_reply_text_keeps_a_sentence_that_merely_starts_with_on():
    assert strip_quoted_history("On Tuesday I am free.\nCall me.") == "On Tuesday I am free.\nCall me."


def test_subject_normalization_strips_reply_and_forward_prefixes():
    assert normalize_subject("RE: Fwd:  Re[2]: Pricing  plan") == "pricing plan"


def test_authentication_results_are_read_per_method_from_trusted_hosts_only():
    ours = frozenset({"mx.example.com"})
    header = "mx.example.com; spf=pass smtp.mailfrom=a.com; dkim=fail header.d=a.com; dmarc=pass"
    assert authentication_results([header], trusted=ours) == {"spf": "pass", "dkim": "fail", "dmarc": "pass"}
    assert authentication_results([], trusted=ours) == {"spf": "none", "dkim": "none", "dmarc": "none"}
    # A sender can write the header too: one naming another host is not believed.
    forged = "mx.example.com.evil; spf=pass; dkim=pass; dmarc=pass"
    assert authentication_results([forged], trusted=ours) == {"spf": "none", "dkim": "none", "dmarc": "none"}
    assert authentication_results([header], trusted=frozenset()) == {
        "spf": "none",
        "dkim": "none",
        "dmarc": "none",
    }


def test_text_comes_with_plain_line_ends_whatever_the_wire_had():
    raw = mail("sdr@acme.agentcal.localhost", body="Tuesday?\nOr Wednesday?\n").as_bytes()
    crlf = raw.replace(b"\n", b"\r\n")
    parsed = parse_mail(crlf, max_attachment_bytes=1000)
    assert parsed.text == "Tuesday?\nOr Wednesday?\n"
    assert parsed.reply_text == "Tuesday?\nOr Wednesday?"


def test_html_and_attachments_are_read_and_oversize_ones_skipped():
    message = mail("sdr@acme.agentcal.localhost", body="plain body\n")
    message.add_alternative("<p>html body</p>", subtype="html")
    message.add_attachment(b"\x89PNG small", maintype="image", subtype="png", filename="a.png")
    message.add_attachment(b"y" * 100, maintype="application", subtype="zip", filename="big.zip")
    parsed = parse_mail(message.as_bytes(), max_attachment_bytes=50)
    assert parsed.text.strip() == "plain body"
    assert parsed.html.strip() == "<p>html body</p>"
    small, big = parsed.attachments
    assert (small.filename, small.content_type, small.content, small.skipped) == (
        "a.png",
        "image/png",
        b"\x89PNG small",
        False,
    )
    assert (big.size, big.content, big.skipped) == (100, None, True)
    assert parsed.problems == []


MISSING_BOUNDARY = b"""From: ana@example.com
To: sdr@acme.agentcal.localhost
Subject: broken
Message-ID: <broken@example.com>
Content-Type: multipart/mixed

no boundary parameter, so this cannot be split
"""

BAD_BASE64 = b"""From: ana@example.com
To: sdr@acme.agentcal.localhost
Subject: bad base64
Content-Type: multipart/mixed; boundary="XX"

--XX
Content-Type: text/plain; charset=utf-8

readable part
--XX
Content-Type: application/octet-stream; name="f.bin"
Content-Disposition: attachment; filename="f.bin"
Content-Transfer-Encoding: base64

!!!not*base64@@@=
--XX
Content-Type: text/html; charset=x-no-such-charset
Content-Transfer-Encoding: quoted-printable

<p>caf=E9</p>
--XX--
"""


def test_a_multipart_without_a_boundary_is_stored_flagged_and_still_delivered(sdr):
    (message,) = deliver_raw(MISSING_BOUNDARY, [address_of(sdr)])
    raw = InboundRaw.objects.get()
    assert raw.parsed_at is not None
    assert "NoBoundaryInMultipartDefect" in raw.problem
    assert message.subject == "broken"
    assert "cannot be split" in message.text


def test_bad_base64_and_an_unknown_charset_are_flagged_and_what_is_readable_is_kept(sdr):
    (message,) = deliver_raw(BAD_BASE64, [address_of(sdr)])
    raw = InboundRaw.objects.get()
    assert "Base64" in raw.problem
    assert "undecodable text/html part" in raw.problem
    assert message.text.strip() == "readable part"
    assert "caf" in message.html
    assert Attachment.objects.get(message=message).filename == "f.bin"


def test_garbage_bytes_still_make_a_message(sdr):
    (message,) = deliver_raw(b"\x00\xff\xfe\x00 not mail at all \x00", [address_of(sdr)])
    assert message.untrusted is True
    assert InboundRaw.objects.get().parsed_at is not None


def test_a_message_accepted_but_never_parsed_is_parsed_once_by_the_periodic_task(sdr):
    # As if the listener had committed the row and the process died before the parse task ran.
    InboundRaw.objects.create(
        raw=mail(address_of(sdr)).as_bytes(), envelope_from="ana@example.com", envelope_to=[address_of(sdr)]
    )
    assert parse_pending() == {"parsed": 1, "skipped": 0, "failed": 0}
    assert parse_pending() == {"parsed": 0, "skipped": 0, "failed": 0}
    assert Message.objects.count() == 1
    assert InboundRaw.objects.get().parsed_at is not None
