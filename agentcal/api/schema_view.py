"""GET /v1/schema: the OpenAPI document, made once per process and format.

It takes no key, and making it costs about a third of a second of CPU (generating the document, then
rendering ~600 kB of YAML or ~1.2 MB of JSON) against a few milliseconds for an agent's write: made anew
for every request, a handful of keyless clients kept every web worker busy. The document only changes
with the code, so each process makes it once per format and serves the same bytes after that.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from django.http import HttpResponse, QueryDict
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request


class SchemaView(SpectacularAPIView):
    authentication_classes: list = []
    permission_classes: list = []

    # The rendered document by its renderer's media type (at most one per renderer), with its headers.
    _served: ClassVar[dict[str, tuple[bytes, dict[str, str]]]] = {}
    _making: ClassVar[threading.Lock] = threading.Lock()

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        renderer = request.accepted_renderer  # set by DRF's content negotiation
        served = self._served.get(renderer.media_type)
        if served is None:
            with self._making:  # threads of one process asking at once make it once
                served = self._served.get(renderer.media_type)
                if served is None:
                    served = self._served[renderer.media_type] = self._make(request, *args, **kwargs)
        body, headers = served
        return HttpResponse(body, headers=headers)

    def _make(self, request: Request, *args: Any, **kwargs: Any) -> tuple[bytes, dict[str, str]]:
        # Rendered for the renderer's own media type, without the parameters this request's Accept gave
        # it (`; indent=…`): the bytes are kept for every request that picks this renderer.
        request.accepted_media_type = request.accepted_renderer.media_type
        # Nor the query's `version` or `lang`, which the generator would write into the document: the first
        # request after a start would decide them for everyone.
        request._request.GET = QueryDict()
        response = self.finalize_response(request, super().get(request, *args, **kwargs), *args, **kwargs)
        response.render()
        headers = {name: response[name] for name in ("Content-Type", "Content-Disposition")}
        return bytes(response.content), headers
