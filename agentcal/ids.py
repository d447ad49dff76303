"""Public identifiers: a type prefix and a random suffix. Internal integer keys never leave the server."""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_lowercase + string.digits


def new_public_id(prefix: str, length: int = 20) -> str:
    """`prefix_` + `length` random base36 characters (~103 bits for 20)."""
    return f"{prefix}_" + "".join(secrets.choice(_ALPHABET) for _ in range(length))
