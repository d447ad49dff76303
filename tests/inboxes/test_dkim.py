"""Outgoing mail is DKIM-signed when a key is configured: what the relay receives verifies against the
published record (dkimpy's verifier, with the DNS answer the settings page tells owners to publish)."""

from __future__ import annotations

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from inboxes.dkim import signing_key
from tests.inboxes.test_sending import final_status, queued, sink  # noqa: F401 (fixture)


@pytest.fixture
def dkim_key(settings) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    settings.INBOX_DKIM_SELECTOR = "mail2026"
    settings.INBOX_DKIM_PRIVATE_KEY = pem
    return pem


def published(name: bytes, timeout: int = 5) -> bytes:
    assert name == b"mail2026._domainkey.acme.agentcal.localhost.", name
    key = signing_key()
    assert key is not None
    return key.dns_record().encode()


@pytest.mark.slow
def test_mail_through_the_relay_is_signed_for_the_agents_domain(sdr, sink, dkim_key, celery_worker):  # noqa: F811
    response = sdr.client.post(
        "/inbox/send", json={"to": ["ana@example.com"], "subject": "Tuesday", "text": "Does 10:00 work?\n"}
    )
    message_id = queued(response)
    assert final_status(sdr, message_id)["status"] == "sent"

    (raw,) = sink.raw
    assert raw.startswith(b"DKIM-Signature: ")
    signature = raw.split(b"\r\n\r\n", 1)[0]
    assert b"d=acme.agentcal.localhost" in signature and b"s=mail2026" in signature
    assert dkim.verify(raw, dnsfunc=published)
    # The signature covers the body and the headers a forger would change.
    assert not dkim.verify(raw.replace(b"Does 10:00 work?", b"Does 11:00 work?"), dnsfunc=published)
    assert not dkim.verify(raw.replace(b"Subject: Tuesday", b"Subject: Friday"), dnsfunc=published)


@pytest.mark.slow
def test_without_a_key_mail_goes_out_unsigned(sdr, sink, celery_worker):  # noqa: F811
    message_id = queued(
        sdr.client.post("/inbox/send", json={"to": ["ana@example.com"], "subject": "Hi", "text": "Hello"})
    )
    assert final_status(sdr, message_id)["status"] == "sent"
    (raw,) = sink.raw
    assert b"DKIM-Signature" not in raw
