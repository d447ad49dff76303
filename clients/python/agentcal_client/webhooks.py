"""Verify AgentCal's webhook deliveries (Standard Webhooks: https://www.standardwebhooks.com/).

The server signs `{webhook-id}.{webhook-timestamp}.{body}` with HMAC-SHA256 under the endpoint's secret
(`whsec_` + base64, shown once when the endpoint is created) and sends `v1,<base64 signature>` in
`webhook-signature` (several, space-separated, while a secret is being rotated). Verify before parsing,
on the raw body bytes exactly as received, and refuse old timestamps so a captured delivery cannot be
replayed later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentcal_client.errors import WebhookVerificationError

__all__ = ["WebhookVerificationError", "verify"]

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE = timedelta(minutes=5)


def verify(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> dict[str, Any]:
    """Check a delivery's signature and timestamp; return its JSON payload. Raises
    WebhookVerificationError when a header is missing, no signature matches, or the timestamp is
    further than `tolerance` from now."""
    body = payload.encode() if isinstance(payload, str) else payload
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not timestamp or not signatures:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number") from None
    if abs(time.time() - sent_at) > tolerance.total_seconds():
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance (replayed or clock skew)")
    expected = _sign(_key(secret), f"{msg_id}.{sent_at}.".encode() + body)
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            break
    else:
        raise WebhookVerificationError("no webhook-signature matches")
    try:
        parsed = json.loads(body)
    except ValueError:
        raise WebhookVerificationError("the signed body is not JSON") from None
    if not isinstance(parsed, dict):
        raise WebhookVerificationError("the signed body is not a JSON object")
    return parsed


def _key(secret: str) -> bytes:
    try:
        # Padding is optional in secrets people paste; extra "=" is ignored by the decoder.
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX) + "==")
    except (binascii.Error, ValueError):
        raise WebhookVerificationError("the webhook secret is not valid base64") from None
    if not key:
        raise WebhookVerificationError("the webhook secret is empty")
    return key


def _sign(key: bytes, content: bytes) -> str:
    return base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
