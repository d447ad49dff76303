"""Text that PostgreSQL will store (no NUL character, no lone UTF-16 surrogate), and text that is one
line."""

from __future__ import annotations

import re

# PostgreSQL refuses U+0000 in text and jsonb, and a lone surrogate cannot be encoded as UTF-8.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def is_storable(text: str) -> bool:
    return UNSTORABLE.search(text) is None


def storable_text(text: str, max_chars: int) -> str:
    """For recording what a client sent (audit rows): unstorable characters become U+FFFD, then clipped."""
    return UNSTORABLE.sub("\ufffd", text)[:max_chars]


# One line, as Python's str.splitlines() counts lines: the email package also breaks a header where one of
# these is (\v, \f, \x1c-\x1e, \x85, U+2028 and U+2029 as well as CR and LF), so a value without them cannot
# start a header of its own. The one definition for API fields (agentcal.api.fields.OneLineField; this set
# is its published pattern) and for the mail headers we write (inboxes.composing, inboxes.delivery).
LINE_BREAKS = "\n\r\v\f\u001c\u001d\u001e\u0085\u2028\u2029"


def is_one_line(text: str) -> bool:
    return text == "" or text.splitlines() == [text]


def one_line(text: str) -> str:
    """`text` with each line break (is_one_line) made a space: for header values derived from stored text
    (a reply's subject, a display name), where refusing is not an option."""
    return " ".join(text.splitlines())
