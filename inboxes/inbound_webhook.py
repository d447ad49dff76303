"""The inbound-mail webhook: `POST /hooks/inbound-mail/<workspace id>` with one raw RFC 5322 message as
the body, for a mail provider's inbound route or a small forwarder. The other way in besides SMTP, with
the same rules: the same recipient check, storage before the answer, the same size limit.

Signed the Standard Webhooks way under the workspace's own `whsec_` secret; a stale timestamp is
refused, and an id already accepted gets its first answer, stored once. Any signature problem, an
unknown workspace included, is the same 401. Per-peer budgets bound requests (429, nothing written)
and audited refusals before the signature is checked. Recipients come only from the signed message.

Design: docs/architecture.md, "The inbound webhook".
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
from agentcal.metrics import INBOUND_WEBHOOK_UNAUDITED
from agentcal.rate_limits import RateLimiter, limiter_for
from agentcal.sealing import SealedSecretUnreadable
from agentcal.text import is_storable, storable_text
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.addresses import workspace_domain
from inboxes.mail_settings import default_inbound_domain, inbound_webhook_secret
from inboxes.models import InboundRaw, InboundWebhookDelivery
from inboxes.services import InboundRefusal, inbound_recipient_refusal, inbound_store
from inboxes.smtp import MAX_RECIPIENTS_PER_MESSAGE
from webhooks.signing import signature
from workspaces.models import Workspace

logger = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
ACCEPTED_CONTENT_TYPES = frozenset({"message/rfc822", "application/octet-stream"})
# Not covered by the signature, so not read; refused so that a sender still relying on it finds out.
# Where the recipients are looked for, in this order: the first that names any at this workspace's
# domains gives them all.
RECIPIENT_HEADERS = (("Delivered-To",), ("X-Original-To",), ("To", "Cc"))
# Standard Webhooks ids are short (`msg_…`); the column holds 255.
MAX_WEBHOOK_ID_LENGTH = 255
MAX_ADDRESS_LENGTH = 320
# As many as the SMTP listener takes for one message.
MAX_RECIPIENTS = MAX_RECIPIENTS_PER_MESSAGE
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


class PeerRateLimited(InboundRateLimited):
    title = "Too many requests from this address; retry later"


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
    well_formed = is_public_id(workspace_id)
    peer = request.META.get("REMOTE_ADDR", "")
    if not _peer_limiter().allow(f"{workspace_id if well_formed else '-'} {peer}"):
        INBOUND_WEBHOOK_UNAUDITED.labels("rate_limited").inc()
        per_minute = settings.INBOUND_WEBHOOK_MAX_REQUESTS_PER_MINUTE_PER_IP
        raise PeerRateLimited(f"Over {per_minute} requests a minute from this address.")
    # The budget above is per workspace id as written, so made-up ids would each bring a fresh one: the
    # refusals of all of them together are bounded per address too, before the body is read.
    if _peer_refusal_limiter().seconds_until_allowed(peer) > 0:
        INBOUND_WEBHOOK_UNAUDITED.labels("rate_limited").inc()
        per_minute = settings.INBOUND_WEBHOOK_MAX_REFUSALS_PER_MINUTE_PER_IP
        raise PeerRateLimited(f"Over {per_minute} refused requests a minute from this address.")
    workspace = Workspace.objects.filter(public_id=workspace_id).first() if well_formed else None
    try:
        body = _read_body(request)
        _verify(workspace, request, body)
    except AgentCalError as error:
        _peer_refusal_limiter().allow(peer)
        if _refusal_audit_limiter().allow(peer):
            _audit_rejected(request, workspace, error)
        else:
            INBOUND_WEBHOOK_UNAUDITED.labels("over_audit_budget").inc()
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
        recipients = _recipients(headers, workspace)
        if not recipients:
            raise UnknownRecipient(
                "The message names no recipient at this workspace's domain; put the envelope recipient "
                "in its Delivered-To header."
            )
    except AgentCalError as error:
        _audit_rejected(request, workspace, error)
        raise
    sender = _envelope_from(headers)
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
    elif isinstance(error, PeerRateLimited):
        response["Retry-After"] = str(math.ceil(60 / settings.INBOUND_WEBHOOK_MAX_REQUESTS_PER_MINUTE_PER_IP))
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


def _recipients(headers: Any, workspace: Workspace) -> list[str]:
    """The message's recipients at this workspace's domains, from the first of RECIPIENT_HEADERS that
    names any; lowercased, each once.

    The envelope recipient first: a provider calls once per recipient, each time with the same To and Cc,
    so reading those as well would deliver each copy to every agent they name (and a Bcc is only ever in
    Delivered-To)."""
    ours = {workspace_domain(workspace), default_inbound_domain(workspace)}
    addresses: list[str] = []
    for names in RECIPIENT_HEADERS:
        values = [str(value) for name in names for value in headers.get_all(name, [])]
        addresses = [
            address
            for _, address in getaddresses(values)
            if address.rpartition("@")[2].lower().rstrip(".") in ours
        ]
        if addresses:
            break
    unique = list(dict.fromkeys(address.strip().lower() for address in addresses))
    if len(unique) > MAX_RECIPIENTS:
        raise InvalidEnvelope(f"At most {MAX_RECIPIENTS} recipients per message.")
    for address in unique:
        if len(address) > MAX_ADDRESS_LENGTH or not is_storable(address) or not address.isprintable():
            raise InvalidEnvelope(f"{storable_text(address, 80)!r} is not an email address.")
    return unique


def _envelope_from(headers: Any) -> str:
    """Who sent it: Return-Path (where MTAs write the envelope sender), else From; from the signed message
    as the recipients are. A null Return-Path (`<>`) is kept as `<>`, as the SMTP listener records
    `MAIL FROM:<>`: it marks a delivery report, which may fail one of the agent's sent messages."""
    return_path = headers.get("Return-Path")
    if return_path is not None and str(return_path).strip() == "<>":
        return "<>"
    for value in (return_path, headers.get("From")):
        parsed = getaddresses([str(value)]) if value else []
        address = parsed[0][1] if parsed else ""
        if address and is_storable(address):
            return address[:MAX_ADDRESS_LENGTH]
    return ""


# --- Rate ---------------------------------------------------------------------------------------------------


def _workspace_limiter() -> RateLimiter:
    """One token bucket per workspace: the messages it may be sent."""
    return limiter_for("INBOUND_WEBHOOK_MAX_MESSAGES_PER_MINUTE")


def _peer_limiter() -> RateLimiter:
    """One token bucket per workspace id (as written) and peer address, for every request, signed or not."""
    return limiter_for("INBOUND_WEBHOOK_MAX_REQUESTS_PER_MINUTE_PER_IP")


def _peer_refusal_limiter() -> RateLimiter:
    return limiter_for("INBOUND_WEBHOOK_MAX_REFUSALS_PER_MINUTE_PER_IP")


def _refusal_audit_limiter() -> RateLimiter:
    """One token bucket per peer address: the refusals before the signature that are audited."""
    return limiter_for("INBOUND_WEBHOOK_AUDITED_REFUSALS_PER_MINUTE_PER_IP")
