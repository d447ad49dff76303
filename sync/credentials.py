"""Upstream credentials at rest: a JSON object sealed with the project's keyring (agentcal.sealing)."""

from __future__ import annotations

import json
from typing import Any

from agentcal.sealing import SealedSecretUnreadable, reseal_secret, seal_secret, unseal_secret

# What sync callers catch: no configured key unseals a connection's credentials.
CredentialsUnreadable = SealedSecretUnreadable


def seal(credentials: dict[str, Any]) -> str:
    return seal_secret(json.dumps(credentials))


def unseal(secret: str) -> dict[str, Any]:
    credentials: dict[str, Any] = json.loads(unseal_secret(secret))
    return credentials


def reseal(secret: str) -> str:
    """The same credentials under the current first key (key rotation)."""
    return reseal_secret(secret)
