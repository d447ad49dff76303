"""Text that PostgreSQL will store: no NUL character, no lone UTF-16 surrogate."""

from __future__ import annotations

import re

# PostgreSQL refuses U+0000 in text and jsonb, and a lone surrogate cannot be encoded as UTF-8.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def is_storable(text: str) -> bool:
    return UNSTORABLE.search(text) is None


def storable_text(text: str, max_chars: int) -> str:
    """For recording what a client sent (audit rows): unstorable characters become U+FFFD, then clipped."""
    return UNSTORABLE.sub("\ufffd", text)[:max_chars]
