from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from agentcal import json_codec
from agentcal.errors import PayloadTooLarge
from agentcal.text import is_storable


class BoundedJSONParser(JSONParser):
    """JSON parser that refuses oversized bodies (413) before reading them whole.

    DRF reads the request stream directly, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE does not apply.
    """

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        limit = settings.API_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        if declared > limit:
            raise PayloadTooLarge(f"The body is {declared} bytes; the limit is {limit}.", max_bytes=limit)
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"The body is over the {limit}-byte limit.", max_bytes=limit)
        if not raw.strip():
            return {}
        try:
            value = json_codec.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
        except RecursionError:
            raise ParseError(f"The body nests deeper than {MAX_JSON_DEPTH} levels.") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise ParseError(f"The body is not valid JSON: {exc}") from exc
        _check_storable(value)
        return value


# Deeper than any real request needs, and far below the interpreter's recursion limit (later code,
# e.g. the request fingerprint, walks the document recursively).
MAX_JSON_DEPTH = 32


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:32]} is out of range")
    return value


def _check_storable(document: Any) -> None:
    """Refuse what PostgreSQL cannot store (NUL, lone surrogates) and absurd nesting, in one walk."""
    pending: list[tuple[Any, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            if not is_storable(value):
                raise ParseError("Strings may not contain U+0000 or unpaired UTF-16 surrogates.")
        elif isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise ParseError(f"The body nests deeper than {MAX_JSON_DEPTH} levels.")
            if isinstance(value, dict):
                pending.extend((key, depth) for key in value)
                pending.extend((item, depth + 1) for item in value.values())
            else:
                pending.extend((item, depth + 1) for item in value)
