from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from agentcal.errors import PayloadTooLarge


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
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ParseError(f"The body is not valid JSON: {exc}") from exc
