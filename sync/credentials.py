"""Upstream credentials at rest: Fernet-encrypted with the keys of settings.SYNC_CREDENTIAL_KEYS
(MultiFernet: the first key encrypts, every key decrypts, so keys rotate without downtime).

Without configured keys, one is derived from SECRET_KEY (a fresh clone then works with nothing set);
production sets SYNC_CREDENTIAL_KEYS so that rotating SECRET_KEY does not lock credentials away.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class CredentialsUnreadable(Exception):
    """No configured key decrypts the stored credentials (a key was dropped too early)."""


def _fernet() -> MultiFernet:
    keys = list(settings.SYNC_CREDENTIAL_KEYS)
    if not keys:
        derived = hashlib.sha256(b"agentcal.sync.credentials:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(derived).decode()]
    return MultiFernet([Fernet(key) for key in keys])


def seal(credentials: dict[str, Any]) -> str:
    return _fernet().encrypt(json.dumps(credentials).encode()).decode()


def unseal(secret: str) -> dict[str, Any]:
    try:
        credentials: dict[str, Any] = json.loads(_fernet().decrypt(secret.encode()))
        return credentials
    except InvalidToken as exc:
        raise CredentialsUnreadable("no configured key decrypts these credentials") from exc


def reseal(secret: str) -> str:
    """The same credentials under the current first key (key rotation)."""
    try:
        return _fernet().rotate(secret.encode()).decode()
    except InvalidToken as exc:
        raise CredentialsUnreadable("no configured key decrypts these credentials") from exc
