"""Reading an RFC 5322 message into what an inbox shows: addresses, bodies, attachments, threading headers,
sender authentication results and the reply without its quoted history.

Everything here is a pure function of the bytes (and the limits). Nothing raises on bad input: malformed
MIME, unknown charsets and broken encodings are read as far as they go and described in
`ParsedMail.problems`. A structure beyond the limits (ParseLimits: parts, nesting, attachments) is read up
to them, and what was left out is said in `ParsedMail.notes`, which the agent sees.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import re
from dataclasses import dataclass, field
from email.feedparser import BytesFeedParser
from email.message import EmailMessage, Message
from typing import Any

from django.conf import settings

from agentcal.text import storable_text
from inboxes.ical import CalendarInvite, invite_read, is_calendar_part
from inboxes.sender_auth import AUTH_METHODS, authentication_results

# Headers longer than this are clipped (the columns are varchar(998), the RFC 5322 line limit).
MAX_HEADER_CHARS = 998
MAX_BODY_CHARS = 5_000_000


@dataclass
class ParsedAttachment:
    filename: str
    content_type: str
    size: int
    content: bytes | None  # None when over the size cap
    skipped: bool


@dataclass
class ParsedMail:
    message_id: str = ""
    in_reply_to: str = ""
    references: list[str] = field(default_factory=list)
    from_address: dict[str, str] | None = None
    to: list[dict[str, str]] = field(default_factory=list)
    cc: list[dict[str, str]] = field(default_factory=list)
    subject: str = ""
    text: str = ""
    html: str = ""
    reply_text: str = ""
    attachments: list[ParsedAttachment] = field(default_factory=list)
    auth_results: dict[str, str] = field(default_factory=lambda: dict.fromkeys(AUTH_METHODS, "none"))
    problems: list[str] = field(default_factory=list)
    # The text/calendar parts and .ics attachments, decoded, and the invite read from them.
    calendar_parts: list[bytes] = field(default_factory=list)
    invite: CalendarInvite | None = None
    # What was left unread under the limits on a message's structure (ParseLimits), said to the agent:
    # the raw message still holds all of it.
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ParseLimits:
    """How much of a message's MIME structure is read (the INBOUND_MAX_* settings): together with the
    message size limit they bound the work one message can cost, whatever its structure."""

    max_parts: int
    max_depth: int
    max_attachments: int

    @classmethod
    def from_settings(cls) -> ParseLimits:
        return cls(
            max_parts=settings.INBOUND_MAX_MIME_PARTS,
            max_depth=settings.INBOUND_MAX_MIME_DEPTH,
            max_attachments=settings.INBOUND_MAX_ATTACHMENTS_PER_MESSAGE,
        )


def clean(text: str, max_chars: int = MAX_HEADER_CHARS) -> str:
    return storable_text(text, max_chars)


def parse_mail(raw: bytes, *, max_attachment_bytes: int, limits: ParseLimits | None = None) -> ParsedMail:
    limits = limits or ParseLimits.from_settings()
    parsed = ParsedMail()
    try:
        message = _bounded_parse(raw, limits, parsed)
    except Exception as exc:  # the parser is lenient, but a message must never fail to be stored
        parsed.problems.append(f"unreadable message: {type(exc).__name__}")
        return parsed
    _read_headers(message, parsed)
    _read_parts(message, parsed, max_attachment_bytes=max_attachment_bytes, limits=limits)
    parsed.problems.extend(parsed.notes)
    parsed.reply_text = strip_quoted_history(parsed.text)
    parsed.invite = invite_read(parsed.calendar_parts)
    if parsed.invite is not None and parsed.invite.problem:
        parsed.problems.append(f"unreadable calendar invite: {parsed.invite.problem}")
    return parsed


# --- Structure ---------------------------------------------------------------------------------------

RAW_MESSAGE_HINT = "the raw message (/raw) has all of it"


class _LimitReached(Exception):
    pass


class _BoundedFeedParser(BytesFeedParser):
    """The email package's parser, made to stop where a message would have more MIME parts, or parts
    nested deeper, than the limits allow. Its parser is recursive: a multipart nested a few thousand
    deep exhausts Python's recursion limit (the whole message unreadable) after seconds of work, and
    every part is an object however small; so the structure is bounded while it is read, not after."""

    def __init__(self, limits: ParseLimits) -> None:
        super().__init__(policy=email.policy.default)
        self.limits = limits
        self.parts = 0
        self.over = ""  # the limit that stopped the parse, if one did

    def _new_message(self) -> None:
        # The feedparser's one place a part (the root, a multipart's part, a message/* body, a
        # delivery-status block) comes into being; `_msgstack` is the chain of parts open now, the root
        # first. Checked before the part exists, so what was read is whole up to here.
        depth = len(self._msgstack) + 1  # type: ignore[attr-defined]
        if self.parts + 1 > self.limits.max_parts:
            self.over = f"The message has more than {self.limits.max_parts} MIME parts"
        elif depth > self.limits.max_depth:
            self.over = f"The message's MIME parts are nested more than {self.limits.max_depth} deep"
        if self.over:
            raise _LimitReached
        super()._new_message()  # type: ignore[misc]
        self.parts += 1

    def root(self) -> Message:
        """The message read so far, once a limit stopped the parse: every part before that one as it was
        read, the parts still open (containers) holding the parts they had."""
        root = self._msgstack[0]  # type: ignore[attr-defined]
        assert isinstance(root, Message)
        return root


def _bounded_parse(raw: bytes, limits: ParseLimits, parsed: ParsedMail) -> Message:
    parser = _BoundedFeedParser(limits)
    try:
        parser.feed(raw)
        return parser.close()
    except _LimitReached:
        # The rest is not read (nor parsed: that is the point).
        parsed.notes.append(f"{parser.over}: only what comes before was read; {RAW_MESSAGE_HINT}.")
        return parser.root()


# --- Headers -----------------------------------------------------------------------------------------


def _header(message: Message, name: str, parsed: ParsedMail) -> str:
    try:
        value = message.get(name)
    except Exception as exc:  # a header the policy cannot parse
        parsed.problems.append(f"unreadable {name} header: {type(exc).__name__}")
        return ""
    return "" if value is None else str(value)


def message_ids(value: str) -> list[str]:
    """The ids in a Message-ID, In-Reply-To or References header, without their angle brackets."""
    ids = re.findall(r"<([^<>\s]+)>", value)
    if not ids and value.strip():
        ids = value.split()
    return [clean(i) for i in ids]


def _addresses(message: Message, name: str, parsed: ParsedMail) -> list[dict[str, str]]:
    values = []
    try:
        values = [str(v) for v in message.get_all(name) or []]
    except Exception as exc:
        parsed.problems.append(f"unreadable {name} header: {type(exc).__name__}")
    found = []
    for display_name, address in email.utils.getaddresses(values):
        if address:
            found.append({"name": clean(display_name, 320), "address": clean(address, 320).lower()})
    return found


# Control characters (C0, DEL, C1) and the line breaks the email package and str.splitlines() know.
_NOT_ONE_LINE = re.compile("\r\n|[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line_header(value: str) -> str:
    """A header value as one line of text: unfolded (RFC 5322 2.2.3: a CRLF followed by white space is
    removed, the white space kept), then every other line break (CRLF, CR, LF, ...) or control character,
    which only an encoded word (RFC 2047) can carry into a decoded value, made one space. A subject is
    shown to agents and people and copied into replies: "Hello\r\nBcc: x" must not read as two lines."""
    return _NOT_ONE_LINE.sub(" ", re.sub(r"\r?\n(?=[ \t])", "", value))


def _read_headers(message: Message, parsed: ParsedMail) -> None:
    parsed.subject = clean(one_line_header(_header(message, "Subject", parsed)))
    parsed.message_id = next(iter(message_ids(_header(message, "Message-ID", parsed))), "")
    parsed.in_reply_to = next(iter(message_ids(_header(message, "In-Reply-To", parsed))), "")
    parsed.references = message_ids(_header(message, "References", parsed))[-50:]
    senders = _addresses(message, "From", parsed)
    parsed.from_address = senders[0] if senders else None
    parsed.to = _addresses(message, "To", parsed)
    parsed.cc = _addresses(message, "Cc", parsed)
    try:
        results = [str(v) for v in message.get_all("Authentication-Results") or []]
    except Exception:
        results = []
    parsed.auth_results = authentication_results(
        results, trusted=frozenset(settings.INBOUND_TRUSTED_AUTHSERV_IDS)
    )


# --- Bodies and attachments --------------------------------------------------------------------------


def _decoded_text(part: Message, parsed: ParsedMail) -> str:
    """The part's text with plain `\n` line ends (mail's CRLF is a transport detail agents need not see)."""
    try:
        if isinstance(part, EmailMessage):
            content: Any = part.get_content()
            if isinstance(content, str):
                return clean(_lf(content), MAX_BODY_CHARS)
    except Exception as exc:  # an unknown charset, a broken transfer encoding
        parsed.problems.append(f"undecodable {part.get_content_type()} part: {type(exc).__name__}")
    payload = part.get_payload(decode=True)
    if isinstance(payload, bytes):
        return clean(_lf(payload.decode("utf-8", errors="replace")), MAX_BODY_CHARS)
    return ""


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_parts(
    message: Message, parsed: ParsedMail, *, max_attachment_bytes: int, limits: ParseLimits
) -> None:
    defects = [type(d).__name__ for d in message.defects]
    attachments_beyond = 0
    for part in message.walk():  # at most limits.max_parts parts, limits.max_depth deep
        if part is not message:
            defects.extend(type(d).__name__ for d in part.defects)
        if part.is_multipart():
            continue
        content_type = part.get_content_type()
        try:
            filename = part.get_filename() or ""
        except Exception:
            filename = ""
        disposition = part.get_content_disposition()
        if part.get_content_maintype() == "multipart":
            # A multipart whose boundary is missing: its body cannot be split, so it is read as text.
            if not parsed.text:
                parsed.text = _decoded_text(part, parsed)
            continue
        if disposition != "attachment" and not filename and content_type in ("text/plain", "text/html"):
            body = "text" if content_type == "text/plain" else "html"
            if not getattr(parsed, body):
                setattr(parsed, body, _decoded_text(part, parsed))
            continue
        if content_type == "message/rfc822" and disposition != "attachment":
            continue  # its own parts are walked
        is_calendar = is_calendar_part(content_type, filename)
        beyond = len(parsed.attachments) >= limits.max_attachments
        if beyond:
            # Not stored: each would be a file and a row, and thousands of them offer the agent nothing
            # the raw message does not. An invite among them is still read.
            attachments_beyond += 1
            if not is_calendar:
                continue
        payload = part.get_payload(decode=True)
        content = payload if isinstance(payload, bytes) else b""
        too_big = len(content) > max_attachment_bytes
        if is_calendar:
            parsed.calendar_parts.append(content)
        if beyond:
            continue
        parsed.attachments.append(
            ParsedAttachment(
                filename=clean(filename, 500),
                content_type=clean(content_type, 255),
                size=len(content),
                content=None if too_big else content,
                skipped=too_big,
            )
        )
        # Decoding may have found more defects (bad base64).
        defects.extend(type(d).__name__ for d in part.defects if type(d).__name__ not in defects)
    for name in dict.fromkeys(defects):
        parsed.problems.append(f"MIME defect: {name}")
    if attachments_beyond:
        parsed.notes.append(
            f"Attachments beyond the first {limits.max_attachments} were not stored ({attachments_beyond} of "
            f"them); {RAW_MESSAGE_HINT}."
        )


# --- Quoted history ----------------------------------------------------------------------------------

# "On Mon, 1 Dec 2026 at 09:00, Ana <ana@example.com> wrote:" (Gmail, Apple Mail, Thunderbird); mail
# clients wrap long attributions, so "wrote:" may end the next line instead.
_ATTRIBUTION_START = re.compile(r"^\s*On\s.+", re.IGNORECASE)
_ATTRIBUTION_END = re.compile(r"wrote:\s*$", re.IGNORECASE)
_OUTLOOK_SEPARATOR = re.compile(r"^\s*-{2,}\s*Original Message\s*-{2,}\s*$", re.IGNORECASE)


def strip_quoted_history(text: str) -> str:
    """The new part of a reply: lines quoted with ">" are dropped, and an "On … wrote:" attribution
    (or Outlook's "Original Message" separator) ends it, since everything after it is the history."""
    lines = text.splitlines()
    kept: list[str] = []
    for index, line in enumerate(lines):
        if _OUTLOOK_SEPARATOR.match(line):
            break
        if _ATTRIBUTION_START.match(line):
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if _ATTRIBUTION_END.search(line) or (
                _ATTRIBUTION_END.search(following) and not following.lstrip().startswith(">")
            ):
                break
        if line.lstrip().startswith(">"):
            continue
        kept.append(line)
    return "\n".join(kept).strip()


def normalize_subject(subject: str) -> str:
    """The subject without reply and forward prefixes ("Re: Fwd: RE[2]: x" → "x"), lowercased."""
    previous = None
    subject = subject.strip()
    while previous != subject:
        previous = subject
        subject = re.sub(r"^(re|fwd?|aw|sv|wg)\s*(\[\d+\])?\s*:\s*", "", subject, flags=re.IGNORECASE)
    return " ".join(subject.split()).lower()[:MAX_HEADER_CHARS]
