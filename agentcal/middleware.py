from __future__ import annotations

import io
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.http.request import split_domain_port

from agentcal.ids import new_public_id
from agentcal.text import is_storable

_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class RequestIdMiddleware:
    """Give every request an id (the client's X-Request-ID when it is sane), echoed back and audited."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        supplied = request.META.get("HTTP_X_REQUEST_ID", "")  # not request.headers: it copies every header
        request.request_id = supplied if _CLIENT_REQUEST_ID.match(supplied) else new_public_id("req", 16)  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id  # type: ignore[attr-defined]
        return response


class ChunkedBodyMiddleware:
    """Make a chunked request body (no Content-Length) readable by the agent API.

    Django reads a body only up to Content-Length, so without one a chunked body would be read as
    empty and the request would run as if nothing had been sent. Where the server says its input ends
    by itself (`wsgi.input_terminated`, as gunicorn does), the body is read here, at most one byte
    past the API's limit so the parser can still answer 413; elsewhere the client is told to send a
    length.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        chunked = "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not meta.get("CONTENT_LENGTH") and request.path.startswith("/v1/"):
            if not meta.get("wsgi.input_terminated"):
                from agentcal.api.problems import length_required

                return length_required()
            body = meta["wsgi.input"].read(settings.API_MAX_BODY_BYTES + 1)
            meta["CONTENT_LENGTH"] = str(len(body))
            request._stream = LimitedStream(io.BytesIO(body), len(body))  # type: ignore[assignment]
        return self.get_response(request)


class UnstorableQueryMiddleware:
    """Pages for people answer 400 to a path or query string holding U+0000 or a lone surrogate, which
    PostgreSQL cannot compare or store. (The agent API refuses them in its base view, where the refusal
    is audited with the agent who sent it.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/v1/"):
            texts = [request.path, *request.GET.keys(), *(v for _, vs in request.GET.lists() for v in vs)]
            if not all(map(is_storable, texts)):
                return HttpResponseBadRequest("The address holds characters no page can take.")
        return self.get_response(request)


# The agent API's paths that take no key: they answer whatever key comes along, a refused one too (a
# monitor that probes with its agent's key must not read "rate limited" as "down").
KEYLESS_PATHS = frozenset({"/v1/health", "/v1/schema"})


class RefusedKeysMiddleware:
    """An agent API request whose key this process refused for its rate, sent before the Retry-After it
    was told, is refused here, before the rest of the stack runs (workspaces.limits.RefusedKeys): a
    flood that ignores Retry-After costs an HMAC per request."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/v1/") and request.path not in KEYLESS_PATHS:
            from workspaces.limits import REFUSED_KEYS

            refused = REFUSED_KEYS.refusal(request.META.get("HTTP_AUTHORIZATION", ""))
            if refused is not None:
                from agentcal.api.problems import problem_json_response

                response = problem_json_response(refused)
                for name, value in refused.rate_headers.items():  # type: ignore[attr-defined]
                    response[name] = value
                return response
        return self.get_response(request)


# Paths that are not pages for people: agents, providers' hooks and scrapers use whatever address they were
# given, and a redirect would only break them (a redirected POST loses its body).
_NOT_PAGES = ("/v1/", "/hooks/", "/metrics", "/static/")


def _port_of(scheme: str, port: str | int | None) -> int:
    return int(port) if port else (443 if scheme == "https" else 80)


class CanonicalHostMiddleware:
    """Send people who reach the dashboard by another name of this server (http://127.0.0.1:8000 for
    http://localhost:8000) to the same page at DASHBOARD_BASE_URL.

    Passkeys are bound to DASHBOARD_BASE_URL's host name (the WebAuthn relying-party id; an IP address is
    never a valid one), so on any other name the browser refuses them with a bare "invalid domain". Only a
    request on the base URL's port counts as this server under another name: the same host name on another
    port is another server (a second instance, a test server) and is left alone.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in ("GET", "HEAD") and not request.path.startswith(_NOT_PAGES):
            canonical = urlsplit(settings.DASHBOARD_BASE_URL)
            host, port = split_domain_port(request.get_host())
            if (
                canonical.hostname
                and host != canonical.hostname.lower()
                and _port_of(request.scheme or "http", port) == _port_of(canonical.scheme, canonical.port)
            ):
                return HttpResponseRedirect(settings.DASHBOARD_BASE_URL + request.get_full_path())
        return self.get_response(request)
