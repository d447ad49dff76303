"""Bounces: a delivery status notification (RFC 3464) coming back for a message an agent sent.

A report counts only when it arrived with a null envelope sender (`MAIL FROM:<>`), and only for the
failed addresses that were recipients of the message it names (inboxes.outcomes.message_bounced), which
is then marked failed; the report itself still lands in the inbox like any other mail.

Design: docs/architecture.md, "Bounces".
"""

from __future__ import annotations

import email
import email.policy
from dataclasses import dataclass, field
from email.message import Message as MimeMessage

from inboxes.parsing import clean, message_ids

# RFC 3464 `Action` values that mean the message will not arrive (delayed/relayed/delivered do not).
FAILED_ACTIONS = frozenset({"failed"})


@dataclass(frozen=True)
class FailedRecipient:
    address: str
    status: str  # the enhanced status code, e.g. 5.1.1
    diagnostic: str


@dataclass(frozen=True)
class Bounce:
    original_message_id: str  # without <>
    recipients: list[FailedRecipient] = field(default_factory=list)

    def summary(self) -> str:
        return (
            "; ".join(f"{r.address}: {r.status} {r.diagnostic}".strip() for r in self.recipients) or "bounced"
        )


def null_sender(envelope_from: str) -> bool:
    """Whether an InboundRaw's envelope sender is the null reverse-path: recorded as "" or as "<>" (which
    is what aiosmtpd, behind our SMTP listener, makes of `MAIL FROM:<>`)."""
    return envelope_from.strip() in ("", "<>")


def bounce_in(raw: bytes) -> Bounce | None:
    """The failure report in `raw`, or None if it is not a delivery status notification of a failure
    that names the original message. Never raises: a malformed report is just not a bounce."""
    try:
        report = email.message_from_bytes(raw, policy=email.policy.compat32)
        if report.get_content_type() != "multipart/report":
            return None
        if (report.get_param("report-type") or "").lower() != "delivery-status":  # type: ignore[union-attr]
            return None
        recipients: list[FailedRecipient] = []
        original_id = ""
        for part in report.walk():
            kind = part.get_content_type()
            if kind == "message/delivery-status":
                recipients.extend(_failed_recipients(part))
            elif kind in ("message/rfc822", "text/rfc822-headers", "message/rfc822-headers"):
                original_id = original_id or _original_message_id(part)
        if not recipients or not original_id:
            return None
        return Bounce(original_message_id=original_id, recipients=recipients)
    except Exception:  # noqa: BLE001 — a stranger's bytes: anything unreadable is simply not a bounce
        return None


def _failed_recipients(part: MimeMessage) -> list[FailedRecipient]:
    # The delivery-status body is header blocks: one per message, then one per recipient. The email
    # package parses it into sub-messages (payload list) or leaves text; handle both.
    payload = part.get_payload()
    blocks: list[MimeMessage] = []
    if isinstance(payload, list):
        blocks = [b for b in payload if isinstance(b, MimeMessage)]
    elif isinstance(payload, str):
        blocks = [email.message_from_string(chunk) for chunk in payload.replace("\r\n", "\n").split("\n\n")]
    failed = []
    for block in blocks:
        action = (block.get("Action") or "").strip().lower()
        recipient = block.get("Final-Recipient") or block.get("Original-Recipient") or ""
        if action not in FAILED_ACTIONS or not recipient:
            continue
        address = recipient.split(";", 1)[-1].strip().strip("<>")
        failed.append(
            FailedRecipient(
                address=clean(address, 320),
                status=clean((block.get("Status") or "").strip(), 32),
                diagnostic=clean(" ".join((block.get("Diagnostic-Code") or "").split()), 500),
            )
        )
    return failed


def _original_message_id(part: MimeMessage) -> str:
    payload = part.get_payload()
    if isinstance(payload, list) and payload and isinstance(payload[0], MimeMessage):
        headers = payload[0]
    elif isinstance(payload, str):
        headers = email.message_from_string(payload)
    else:
        return ""
    ids = message_ids(str(headers.get("Message-ID") or ""))
    return ids[0] if ids else ""
