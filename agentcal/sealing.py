"""Secrets at rest that the server must read back — upstream calendar credentials, the inbound-mail webhook
key it verifies signatures with — unlike API keys, which it only compares against a hash.

Fernet-sealed under settings.SYNC_CREDENTIAL_KEYS (MultiFernet: the first key seals, every key unseals,
so keys rotate without downtime). Without configured keys, one is derived from SECRET_KEY, so a fresh
clone works with nothing set; production sets the keys so that rotating SECRET_KEY locks nothing away.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SealedSecretUnreadable(Exception):
    """No configured key unseals the stored secret (a key was dropped too early)."""


def _fernet() -> MultiFernet:
    keys = list(settings.SYNC_CREDENTIAL_KEYS)
    if not keys:
        # The label predates other secrets sharing the keyring; changing it would orphan what is sealed.
        derived = hashlib.sha256(b"agentcal.sync.credentials:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(derived).decode()]
    return MultiFernet([Fernet(key) for key in keys])


def seal_secret(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def unseal_secret(sealed: str) -> str:
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken as exc:
        raise SealedSecretUnreadable("no configured key unseals this secret") from exc


def reseal_secret(sealed: str) -> str:
    """The same secret under the current first key (key rotation)."""
    try:
        return _fernet().rotate(sealed.encode()).decode()
    except InvalidToken as exc:
        raise SealedSecretUnreadable("no configured key unseals this secret") from exc
