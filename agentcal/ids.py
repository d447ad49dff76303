"""Public identifiers: a type prefix and a random suffix. Internal integer keys never leave the server."""

from __future__ import annotations

import re
import secrets

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
# Random bytes become digits by one bytes.translate() call: 252 = 7 x 36 byte values map onto the 36
# digits evenly, and the 4 above are deleted (so every digit is equally likely).
_BYTE_TO_DIGIT = (_DIGITS * 7).encode() + bytes(4)
_UNEVEN_BYTES = bytes(range(252, 256))


def new_public_id(prefix: str, length: int = 20) -> str:
    """`prefix_` + `length` random base36 characters (~103 bits for 20), all in C: a write makes several
    ids (docs/performance-notes.md)."""
    while True:
        # Twice the bytes needed: fewer than half kept happens with a probability below 1e-30.
        digits = secrets.token_bytes(2 * length).translate(_BYTE_TO_DIGIT, _UNEVEN_BYTES)
        if len(digits) >= length:
            return f"{prefix}_{digits[:length].decode()}"


# Every public id fits this (prefix, underscore, base36 suffix; the columns are varchar(32)). A path
# parameter that does not is answered 404 before it reaches a query: a NUL byte or an over-long value
# would otherwise make PostgreSQL refuse the look-up, or the refusal's own audit row.
PUBLIC_ID_MAX_LENGTH = 32
_PUBLIC_ID = re.compile(r"[a-z]{2,6}_[a-z0-9]{1,25}")


def is_public_id(value: str) -> bool:
    return len(value) <= PUBLIC_ID_MAX_LENGTH and _PUBLIC_ID.fullmatch(value) is not None
