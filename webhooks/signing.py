"""Standard Webhooks signing (https://www.standardwebhooks.com/): secrets, signatures, headers.

Receivers verify with any Standard Webhooks library (e.g. the `standardwebhooks` package):
the signed content is ``{webhook-id}.{webhook-timestamp}.{body}`` and the HMAC-SHA256 key is the
base64-decoded part of the secret after ``whsec_``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
# 24 bytes = 192 bits, within the spec's 24–64 byte range, and a whole number of base64 quanta,
# so the encoded secret has no "=" padding.
SECRET_BYTES = 24
USER_AGENT = "AgentCal-Webhooks/1"


def new_signing_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def _secret_key(secret: str) -> bytes:
    encoded = secret.removeprefix(SECRET_PREFIX)
    # Extra "=" padding is ignored by b64decode, and it lets unpadded secrets decode too: the same
    # leniency as the reference `standardwebhooks` package, so both sides derive the same key.
    key = base64.b64decode(encoded + "==")
    if not key:
        raise ValueError("webhook signing secret is empty")
    return key


def signature(*, secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed_content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_secret_key(secret), signed_content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(*, secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret=secret, msg_id=msg_id, timestamp=timestamp, body=body),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }
