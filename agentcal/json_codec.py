"""JSON in C (orjson) where it reads and writes what the standard library would, the standard library
for the rest: the agent API's bodies and answers, and the JSON values the engine's statements send.

Where the two differ: orjson reads integers past 64 bits as floats, refuses in its own words what the
standard library refuses, cannot write integers past 64 bits or lone surrogates, writes datetimes its own
way and leaves U+2028/U+2029 unescaped; each of those goes the standard library's way here. A float may be
written another way for the same number (`0.00001` for `1e-05`). docs/performance-notes.md: what it saves.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import orjson
from rest_framework.utils.encoders import JSONEncoder

# Long enough to lose precision as a float: the standard library reads such a number exactly.
_WIDE_INTEGER = re.compile(rb"[0-9]{19}")
# Datetimes and dataclasses are passed through: to DRF's encoder when answering, to json.dumps (which
# refuses them, as it always did) when storing.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_NON_STR_KEYS
# U+2028 and U+2029 in UTF-8, and as DRF escapes them.
_LINE_SEPARATORS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))
_drf_encoder = JSONEncoder()


def loads(raw: bytes, *, parse_float: Callable[[str], float], parse_constant: Callable[[str], Any]) -> Any:
    """The document in `raw`, as `json.loads(raw.decode("utf-8"), …)` reads it (its exceptions too)."""
    if not _WIDE_INTEGER.search(raw):
        try:
            return orjson.loads(raw)  # floats past the double range are refused: the hooks would refuse them
        except orjson.JSONDecodeError:
            pass  # the standard library names the problem, as it always did
    return json.loads(raw.decode("utf-8"), parse_constant=parse_constant, parse_float=parse_float)


def dumps_jsonb(value: Any) -> bytes | str:
    """A JSON column's value as psycopg sends it (psycopg.types.json.Jsonb's `dumps`): what json.dumps
    would store, and its TypeError for what it cannot store (a datetime, say)."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return json.dumps(value)


def dumps(data: Any) -> bytes | None:
    """Compact UTF-8 JSON, as DRF's JSONRenderer writes it; None when orjson cannot say the same (the
    caller then renders with the standard library)."""
    try:
        rendered = orjson.dumps(data, default=_drf_encoder.default, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return None
    if b"\xe2\x80" in rendered:
        for separator, escaped in _LINE_SEPARATORS:
            rendered = rendered.replace(separator, escaped)
    return rendered
