"""The agent API's JSON renderer: DRF's, with the codec in C (agentcal.json_codec)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import renderers

from agentcal import json_codec


class JSONRenderer(renderers.JSONRenderer):
    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        # `Accept: application/json; indent=4` asks for pretty printing: DRF's own path.
        if "indent" not in (accepted_media_type or "") and not (renderer_context or {}).get("indent"):
            rendered = json_codec.dumps(data)
            if rendered is not None:
                return rendered
        return super().render(data, accepted_media_type, renderer_context)
