"""Public identifiers: a type prefix and a random suffix. Internal integer keys never leave the server."""

from __future__ import annotations

import re
import secrets

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def new_public_id(prefix: str, length: int = 20) -> str:
    """`prefix_` + `length` random base36 characters (~103 bits for 20).

    One call to the OS's random source, then base36 digits by division: a write makes several ids
    (docs/performance-notes.md).
    """
    value = int.from_bytes(secrets.token_bytes(length * 6 // 8 + 2)) % 36**length
    digits = []
    for _ in range(length):
        value, digit = divmod(value, 36)
        digits.append(_DIGITS[digit])
    return f"{prefix}_" + "".join(digits)


# Every public id fits this (prefix, underscore, base36 suffix; the columns are varchar(32)). A path
# parameter that does not is answered 404 before it reaches a query: a NUL byte or an over-long value
# would otherwise make PostgreSQL refuse the look-up, or the refusal's own audit row.
PUBLIC_ID_MAX_LENGTH = 32
_PUBLIC_ID = re.compile(r"[a-z]{2,6}_[a-z0-9]{1,25}")


def is_public_id(value: str) -> bool:
    return len(value) <= PUBLIC_ID_MAX_LENGTH and _PUBLIC_ID.fullmatch(value) is not None
