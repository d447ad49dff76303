"""The agent API's content negotiation (REST_FRAMEWORK's DEFAULT_CONTENT_NEGOTIATION_CLASS)."""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class JSONNegotiation(DefaultContentNegotiation):
    """DRF's content negotiation, without parsing `Accept` when it cannot change the answer: a view with
    one renderer, asked with no `Accept`, `*/*` or its own media type, and no `?format=`."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        if (
            isinstance(renderers, list)
            and len(renderers) == 1
            and format_suffix is None
            and request.META.get("HTTP_ACCEPT", "*/*") in ("*/*", renderers[0].media_type)
            and self.settings.URL_FORMAT_OVERRIDE not in request.query_params
        ):
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)
