from __future__ import annotations

import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from agentcal.ids import new_public_id

_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class RequestIdMiddleware:
    """Give every request an id (the client's X-Request-ID when it is sane), echoed back and audited."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        supplied = request.headers.get("X-Request-ID", "")
        request.request_id = supplied if _CLIENT_REQUEST_ID.match(supplied) else new_public_id("req", 16)  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id  # type: ignore[attr-defined]
        return response
