"""Content-Security-Policy on HTML pages and no-store on everything a signed-in person sees.

HSTS is Django's SecurityMiddleware's job (SECURE_HSTS_* settings); this adds what Django 5.2 lacks.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers

# The sign-in pages carry one-time material (magic-link tokens, WebAuthn challenges) to people who
# are not signed in yet, so "signed in" alone would leave them cacheable.
_ONE_TIME_MATERIAL_NAMESPACES = {"accounts"}


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self._wants_policy(response):
            # setdefault: a view that needs a different policy can set its own.
            response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        if self._is_private(request):
            add_never_cache_headers(response)
        return response

    @staticmethod
    def _wants_policy(response: HttpResponse) -> bool:
        if not settings.CONTENT_SECURITY_POLICY:
            return False
        if not response.get("Content-Type", "").startswith("text/html"):
            return False  # the API's JSON and the metrics text are never rendered as pages
        # Django's DEBUG error pages are built from inline <style> and <script>; under the policy they
        # would render unstyled and lose their toggles. They never exist with DEBUG off.
        return not (settings.DEBUG and response.status_code >= 400)

    @staticmethod
    def _is_private(request: HttpRequest) -> bool:
        match = request.resolver_match
        if match is not None and match.namespace in _ONE_TIME_MATERIAL_NAMESPACES:
            return True
        # A dashboard session's user only: on /v1 DRF puts the API key's Actor on request.user, and an
        # agent's HTTP client is no shared browser that shows the next person yesterday's page. Static
        # files never reach AuthenticationMiddleware, so they have no user and keep their caching.
        return isinstance(getattr(request, "user", None), AbstractBaseUser)
