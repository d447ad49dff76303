"""DKIM signatures on outgoing mail (RFC 6376), when a key is configured.

Receivers check the signature against the public key published at `<selector>._domainkey.<domain>`,
where the domain is the sending agent's (its workspace's inbound domain); without a signature, mail from
a custom domain is likely to land in spam or be refused under DMARC. One key serves every workspace:
each domain publishes the same record (shown on the workspace's mail settings page).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# What the signature covers: the headers a forger would change, and the body (relaxed canonicalization
# survives relays that re-fold headers or trim trailing whitespace).
SIGNED_HEADERS = [
    b"from",
    b"to",
    b"cc",
    b"subject",
    b"date",
    b"message-id",
    b"in-reply-to",
    b"references",
    b"mime-version",
    b"content-type",
]


@dataclass(frozen=True)
class SigningKey:
    selector: str
    private_key_pem: bytes

    def dns_record(self) -> str:
        """The TXT record to publish at `<selector>._domainkey.<domain>`."""
        key = serialization.load_pem_private_key(self.private_key_pem, password=None)
        der = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode()}"


@cache
def _load(selector: str, pem: str, path: str) -> SigningKey | None:
    if path:
        pem = Path(path).read_text()
    if not pem:
        return None
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except ValueError as exc:
        raise ImproperlyConfigured(f"INBOX_DKIM_PRIVATE_KEY is not a PEM private key: {exc}") from exc
    if not isinstance(key, rsa.RSAPrivateKey) or key.key_size < 1024:
        raise ImproperlyConfigured("INBOX_DKIM_PRIVATE_KEY must be an RSA key of at least 1024 bits")
    return SigningKey(selector=selector, private_key_pem=pem.encode())


def signing_key() -> SigningKey | None:
    """The configured key, or None (mail goes out unsigned)."""
    return _load(
        settings.INBOX_DKIM_SELECTOR, settings.INBOX_DKIM_PRIVATE_KEY, settings.INBOX_DKIM_PRIVATE_KEY_FILE
    )


def dkim_signed(raw: bytes, *, domain: str, key: SigningKey) -> bytes:
    """`raw` (CRLF line endings, as handed to the relay) with a DKIM-Signature header in front."""
    signature: bytes = dkim.sign(
        raw,
        key.selector.encode(),
        domain.encode(),
        key.private_key_pem,
        canonicalize=(b"relaxed", b"relaxed"),
        include_headers=SIGNED_HEADERS,
        linesep=b"\r\n",
    )
    return signature + raw
