"""Signatures must verify with the reference Standard Webhooks library, byte for byte."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from webhooks.signing import new_signing_secret, signature, signed_headers

BODY = b'{"type":"hold.created","data":{"hold_id":"hld_123","note":"caf\xc3\xa9"}}'


def test_new_secret_is_whsec_base64_of_24_random_bytes() -> None:
    secret = new_signing_secret()

    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 24
    assert new_signing_secret() != secret


def test_signature_is_hmac_sha256_of_id_timestamp_and_body() -> None:
    key = bytes(range(24))
    secret = "whsec_" + base64.b64encode(key).decode()

    expected = hmac.new(key, b"msg_1.1700000000." + BODY, hashlib.sha256).digest()

    assert signature(secret=secret, msg_id="msg_1", timestamp=1700000000, body=BODY) == (
        "v1," + base64.b64encode(expected).decode()
    )


def test_it_matches_the_reference_library_signature() -> None:
    secret = new_signing_secret()
    timestamp = int(time.time())

    ours = signature(secret=secret, msg_id="msg_2", timestamp=timestamp, body=BODY)
    # The reference library signs text; the same UTF-8 body gives the same bytes.
    reference = Webhook(secret).sign("msg_2", datetime.fromtimestamp(timestamp, tz=UTC), BODY.decode())

    assert ours == reference


def test_signed_headers_verify_with_the_reference_library() -> None:
    secret = new_signing_secret()
    headers = signed_headers(secret=secret, msg_id="msg_3", timestamp=int(time.time()), body=BODY)

    payload = Webhook(secret).verify(BODY, headers)

    assert payload["data"]["hold_id"] == "hld_123"
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "AgentCal-Webhooks/1"
    assert headers["webhook-id"] == "msg_3"


def test_a_tampered_body_fails_verification() -> None:
    secret = new_signing_secret()
    headers = signed_headers(secret=secret, msg_id="msg_4", timestamp=int(time.time()), body=BODY)

    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace(b"hld_123", b"hld_999"), headers)


def test_another_secret_fails_verification() -> None:
    headers = signed_headers(
        secret=new_signing_secret(), msg_id="msg_5", timestamp=int(time.time()), body=BODY
    )

    with pytest.raises(WebhookVerificationError):
        Webhook(new_signing_secret()).verify(BODY, headers)


def test_an_old_timestamp_fails_verification() -> None:
    secret = new_signing_secret()
    ten_minutes_ago = int(time.time()) - 600
    headers = signed_headers(secret=secret, msg_id="msg_6", timestamp=ten_minutes_ago, body=BODY)

    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(BODY, headers)


def test_a_changed_timestamp_header_fails_verification() -> None:
    secret = new_signing_secret()
    now = int(time.time())
    headers = signed_headers(secret=secret, msg_id="msg_7", timestamp=now, body=BODY)
    headers["webhook-timestamp"] = str(now - 1)

    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, headers)
