"""The inbound-mail webhook: `POST /hooks/inbound-mail/<workspace id>` with one raw RFC 5322 message as
the body (`Content-Type: message/rfc822` or `application/octet-stream`), for a mail provider's inbound
route or a small forwarder in front of AgentCal. The other way in besides SMTP, with the same rules:
the same recipient check (inboxes.services.inbound_recipient_refusal), the same storage
(inbound_store, then parsing on a worker), the same size limit (INBOUND_MAX_MESSAGE_BYTES).

Signed the Standard Webhooks way, as our own outgoing webhooks are: `webhook-id`, `webhook-timestamp`,
`webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` under the workspace's own
`whsec_` secret (set in the dashboard's mail settings). A timestamp further than
INBOUND_WEBHOOK_TOLERANCE_SECONDS from our clock is refused, and an id already accepted is answered
with its first answer and not stored again, so a sender may retry freely and a captured request cannot
be replayed into a second message.

An unknown workspace, one without a secret, and a wrong signature get the same 401: whoever does not
hold a workspace's secret learns nothing, not even whether the workspace exists (its public id is in
the URL, and ids must not be probeable).

Recipients: the `AgentCal-Envelope-To` request header (comma-separated) when the sender knows the
envelope, otherwise the message's To, Cc and Delivered-To addresses at this workspace's domains
(others in those headers are simply other people's copies). Each goes through the recipient check;
the refused ones are audited as SMTP refusals are, and if none is left the answer is 422.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import math
import time
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import getaddresses
from typing import Any

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agentcal.errors import AgentCalError, PayloadTooLarge, ServiceUnavailable
from agentcal.ids import is_public_id
from agentcal.sealing import SealedSecretUnreadable
from agentcal.text import is_storable, storable_text
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.addresses import workspace_domain
from inboxes.mail_settings import default_inbound_domain, inbound_webhook_secret
from inboxes.models import InboundRaw, InboundWebhookDelivery
from inboxes.services import InboundRefusal, inbound_recipient_refusal, inbound_store
from inboxes.smtp import RateLimiter
from webhooks.signing import signature
from workspaces.models import Workspace

logger = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
ACCEPTED_CONTENT_TYPES = frozenset({"message/rfc822", "application/octet-stream"})
ENVELOPE_TO_HEADER = "AgentCal-Envelope-To"
ENVELOPE_FROM_HEADER = "AgentCal-Envelope-From"
# Standard Webhooks ids are short (`msg_…`); the column holds 255.
MAX_WEBHOOK_ID_LENGTH = 255
MAX_ADDRESS_LENGTH = 320
# As many as an SMTP server must accept for one message (RFC 5321 §4.5.3.1.8).
MAX_RECIPIENTS = 100
# When every recipient is refused for now only (a full inbox): the retry SMTP senders typically wait.
DEFERRED_RETRY_AFTER_SECONDS = 300
# Verifying against this when the workspace is unknown (or has no secret) costs what a real check
# costs, so the time taken does not tell the two apart either.
_NO_SECRET = (
    "whsec_" + base64.b64encode(hashlib.sha256(b"agentcal.inbound-webhook.no-secret").digest()).decode()
)


class InboundWebhookUnverified(AgentCalError):
    status, code, title = 401, "invalid_signature", "The webhook signature does not verify"


class StaleWebhookTimestamp(AgentCalError):
    status, code, title = 401, "stale_timestamp", "The webhook timestamp is outside the accepted window"


class EmptyMessage(AgentCalError):
    status, code, title = 400, "empty_message", "The body holds no message"


class InvalidEnvelope(AgentCalError):
    status, code, title = 400, "invalid_envelope", "The envelope headers are not valid"


class UnsupportedMessageType(AgentCalError):
    status, code, title = 415, "unsupported_media_type", "Send the raw message as message/rfc822"


class LengthRequired(AgentCalError):
    status, code, title = 411, "length_required", "Length required"


class UnknownRecipient(AgentCalError):
    status, code, title = 422, "unknown_recipient", "No recipient of this message has an inbox here"


class RecipientsDeferred(AgentCalError):
    status, code, title = 503, "recipients_deferred", "The recipients cannot take mail now; retry later"


class InboundRateLimited(AgentCalError):
    status, code, title = 429, "rate_limited", "Too many messages for this workspace; retry later"


@csrf_exempt  # a mail provider's server calls it; the signature is the check
@require_POST
def inbound_mail(request: HttpRequest, workspace_id: str) -> HttpResponse:
    try:
        return _receive(request, workspace_id)
    except AgentCalError as error:
        return _problem(error)
    except (OperationalError, InterfaceError):
        # Nothing was stored: the sender keeps the message and retries, as after an SMTP 451.
        logger.exception("inbound webhook: the database failed")
        return _problem(
            ServiceUnavailable("The message was not stored; retry shortly.", retryable=True),
            retry_after=ServiceUnavailable.retry_after_seconds,
        )


def _receive(request: HttpRequest, workspace_id: str) -> HttpResponse:
    workspace = (
        Workspace.objects.filter(public_id=workspace_id).first() if is_public_id(workspace_id) else None
    )
    try:
        body = _read_body(request)
        _verify(workspace, request, body)
    except AgentCalError as error:
        _audit_rejected(request, workspace, error)
        raise
    assert workspace is not None  # _verify refuses an unknown workspace
    webhook_id = request.headers["webhook-id"]
    earlier = InboundWebhookDelivery.objects.filter(workspace=workspace, webhook_id=webhook_id).first()
    if earlier is not None:
        return _answer(earlier, status=200)  # a retry: the message is already stored
    headers = BytesHeaderParser(policy=compat32).parsebytes(body)
    try:
        if not _workspace_limiter().allow(workspace.public_id):
            per_minute = settings.INBOUND_WEBHOOK_MAX_MESSAGES_PER_MINUTE
            raise InboundRateLimited(f"Over {per_minute} messages a minute to this workspace.")
        recipients = _recipients(request, headers, workspace)
        if not recipients:
            raise UnknownRecipient(
                "The message names no recipient at this workspace's domain; send AgentCal-Envelope-To."
            )
    except AgentCalError as error:
        _audit_rejected(request, workspace, error)
        raise
    sender = _envelope_from(request, headers)
    peer = request.META.get("REMOTE_ADDR", "")
    accepted: list[str] = []
    refused: dict[str, InboundRefusal] = {}
    for address in recipients:
        refusal = inbound_recipient_refusal(address, sender=sender, peer=peer, workspace=workspace)
        if refusal is None:
            accepted.append(address)
        else:
            refused[address] = refusal
    if not accepted:
        # Each refusal is audited already, as at RCPT.
        reasons = {address: refusal.reason for address, refusal in sorted(refused.items())}
        if all(refusal.smtp_reply.startswith("4") for refusal in refused.values()):
            # Refused for now only (SMTP would answer 4xx): the sender should keep the message and retry.
            raise RecipientsDeferred(
                "No recipient can take the message now; retry later.",
                refused=sorted(refused),
                reasons=reasons,
            )
        raise UnknownRecipient(
            "None of the recipients is an agent of this workspace.", refused=sorted(refused), reasons=reasons
        )
    return _store(
        workspace=workspace,
        webhook_id=webhook_id,
        body=body,
        sender=sender,
        peer=peer,
        accepted=accepted,
        refused=sorted(refused),
    )


def _store(
    *,
    workspace: Workspace,
    webhook_id: str,
    body: bytes,
    sender: str,
    peer: str,
    accepted: list[str],
    refused: list[str],
) -> HttpResponse:
    deliveries: list[InboundWebhookDelivery] = []

    def record_delivery(row: InboundRaw) -> None:
        deliveries.append(
            InboundWebhookDelivery.objects.create(
                workspace=workspace, webhook_id=webhook_id, raw=row, recipients=accepted, refused=refused
            )
        )

    try:
        raw_id = inbound_store(
            raw=body, envelope_from=sender, recipients=accepted, peer_ip=peer, with_row=record_delivery
        )
    except IntegrityError:
        # The same id raced in on another connection and committed first; its answer stands, and this
        # copy was rolled back with everything it wrote.
        earlier = InboundWebhookDelivery.objects.filter(workspace=workspace, webhook_id=webhook_id).first()
        if earlier is None:
            raise
        return _answer(earlier, status=200)
    logger.info("accepted inbound message %s by webhook for %s", raw_id, ", ".join(accepted))
    return _answer(deliveries[0], status=202)


def _answer(delivery: InboundWebhookDelivery, *, status: int) -> JsonResponse:
    return JsonResponse(
        {
            "id": delivery.public_id,
            "recipients": list(delivery.recipients),
            "refused": list(delivery.refused),
        },
        status=status,
    )


def _problem(error: AgentCalError, *, retry_after: int | None = None) -> JsonResponse:
    response = JsonResponse(error.problem(), status=error.status, content_type=PROBLEM_CONTENT_TYPE)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    elif isinstance(error, InboundRateLimited):
        response["Retry-After"] = str(math.ceil(60 / settings.INBOUND_WEBHOOK_MAX_MESSAGES_PER_MINUTE))
    elif isinstance(error, RecipientsDeferred):
        response["Retry-After"] = str(DEFERRED_RETRY_AFTER_SECONDS)
    return response


# --- The body and its signature -----------------------------------------------------------------------------


def _read_body(request: HttpRequest) -> bytes:
    """The body, never reading more than one byte past the limit."""
    limit = settings.INBOUND_MAX_MESSAGE_BYTES
    too_large = PayloadTooLarge(f"Messages are limited to {limit} bytes.", max_bytes=limit)
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared:
        if not declared.isdigit():
            raise EmptyMessage("Content-Length is not a number.")
        if int(declared) > limit:
            raise too_large
        body = request.read(limit + 1)
    elif "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        # Django reads a body only up to Content-Length; a chunked one is readable only where the server
        # marks where it ends (gunicorn does).
        if not request.META.get("wsgi.input_terminated"):
            raise LengthRequired("This server cannot read a chunked body; send Content-Length.")
        body = request.META["wsgi.input"].read(limit + 1)
    else:
        body = b""
    if len(body) > limit:
        raise too_large
    if request.content_type not in ACCEPTED_CONTENT_TYPES:
        raise UnsupportedMessageType(
            f"Content-Type {storable_text(request.content_type or '(none)', 100)} is not accepted; "
            "send the raw message as message/rfc822 (or application/octet-stream)."
        )
    if not body.strip():
        raise EmptyMessage("The body is empty; send the raw RFC 5322 message.")
    return body


def _verify(workspace: Workspace | None, request: HttpRequest, body: bytes) -> None:
    """Refuse the request unless it is signed with the workspace's secret and fresh."""
    msg_id = request.headers.get("webhook-id", "")
    timestamp = request.headers.get("webhook-timestamp", "")
    presented = request.headers.get("webhook-signature", "").split()
    if not msg_id or len(msg_id) > MAX_WEBHOOK_ID_LENGTH or not msg_id.isprintable() or not msg_id.isascii():
        raise InboundWebhookUnverified("webhook-id is missing or malformed.")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        raise InboundWebhookUnverified("webhook-timestamp is missing or not a Unix time in seconds.")
    secret = _secret_of(workspace)
    expected = signature(
        secret=secret or _NO_SECRET, msg_id=msg_id, timestamp=int(timestamp), body=body
    ).encode()
    # Several signatures may be sent (a sender mid-rotation); any valid v1 one will do.
    matched = any(hmac.compare_digest(expected, candidate.encode()) for candidate in presented)
    if secret is None or not matched:
        raise InboundWebhookUnverified(
            "Sign the request with this workspace's inbound webhook secret (Standard Webhooks, v1)."
        )
    # Checked once the signature is good: only the secret's holder learns that its clock is off.
    skew = abs(time.time() - int(timestamp))
    if skew > settings.INBOUND_WEBHOOK_TOLERANCE_SECONDS:
        raise StaleWebhookTimestamp(
            f"webhook-timestamp is {int(skew)} s from the server's clock; at most "
            f"{settings.INBOUND_WEBHOOK_TOLERANCE_SECONDS} s are accepted."
        )


def _secret_of(workspace: Workspace | None) -> str | None:
    if workspace is None:
        return None
    try:
        return inbound_webhook_secret(workspace)
    except SealedSecretUnreadable:
        logger.error("the inbound webhook secret of %s cannot be unsealed", workspace.public_id)
        return None


def _audit_rejected(request: HttpRequest, workspace: Workspace | None, error: AgentCalError) -> None:
    logger.warning(
        "inbound webhook refused (%s): %s", workspace.public_id if workspace else "-", error.detail
    )
    audit_record(
        event_type=AuditEvent.INBOX_WEBHOOK_REJECTED,
        outcome=Outcome.REJECTED,
        actor=None,
        workspace_id=workspace.pk if workspace else None,
        http_status=error.status,
        failure_reason=error.code,
        request_id=getattr(request, "request_id", ""),
        details={
            "path": storable_text(request.path, 200),
            "peer_ip": request.META.get("REMOTE_ADDR", ""),
            "webhook_id": storable_text(request.headers.get("webhook-id", ""), MAX_WEBHOOK_ID_LENGTH),
        },
    )


# --- The envelope ------------------------------------------------------------------------------------------


def _recipients(request: HttpRequest, headers: Any, workspace: Workspace) -> list[str]:
    """The envelope's recipients as given, else the message's own at this workspace's domains; lowercased,
    each once."""
    given = request.headers.get(ENVELOPE_TO_HEADER)
    if given is not None:
        addresses = [address for _, address in getaddresses([given]) if address]
        if not addresses:
            raise InvalidEnvelope(f"{ENVELOPE_TO_HEADER} names no address.")
    else:
        ours = {workspace_domain(workspace), default_inbound_domain(workspace)}
        named = [*headers.get_all("To", []), *headers.get_all("Cc", []), *headers.get_all("Delivered-To", [])]
        addresses = [
            address
            for _, address in getaddresses([str(value) for value in named])
            if address.rpartition("@")[2].lower().rstrip(".") in ours
        ]
    unique = list(dict.fromkeys(address.strip().lower() for address in addresses))
    if len(unique) > MAX_RECIPIENTS:
        raise InvalidEnvelope(f"At most {MAX_RECIPIENTS} recipients per message.")
    for address in unique:
        if len(address) > MAX_ADDRESS_LENGTH or not is_storable(address) or not address.isprintable():
            raise InvalidEnvelope(f"{storable_text(address, 80)!r} is not an email address.")
    return unique


def _envelope_from(request: HttpRequest, headers: Any) -> str:
    """Who sent it: the envelope sender when given, else Return-Path, else From (for the record only;
    nothing is decided by it)."""
    for value in (
        request.headers.get(ENVELOPE_FROM_HEADER),
        headers.get("Return-Path"),
        headers.get("From"),
    ):
        parsed = getaddresses([str(value)]) if value else []
        address = parsed[0][1] if parsed else ""
        if address and is_storable(address):
            return address[:MAX_ADDRESS_LENGTH]
    return ""


# --- Rate ---------------------------------------------------------------------------------------------------

_limiter: RateLimiter | None = None


def _workspace_limiter() -> RateLimiter:
    """One token bucket per workspace, in this process (as the SMTP listener's per peer address); made
    again when the setting changes."""
    global _limiter
    per_minute = settings.INBOUND_WEBHOOK_MAX_MESSAGES_PER_MINUTE
    if _limiter is None or _limiter.capacity != per_minute:
        _limiter = RateLimiter(per_minute)
    return _limiter
