"""Error pages: problem+json for the agent API, HTML for people."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from prometheus_client import CONTENT_TYPE_LATEST

from agentcal.api.problems import api_not_found, api_server_error


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/v1/"):
        return api_not_found(request, exception)
    return render(
        request, "error.html", {"title": "Not found", "message": "There is nothing here."}, status=404
    )


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/v1/"):
        return api_server_error(request)
    return render(
        request, "error.html", {"title": "Something went wrong", "message": "It has been logged."}, status=500
    )


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus scrape endpoint. With METRICS_TOKEN set, it needs `Authorization: Bearer <token>`;
    without, only the addresses in METRICS_ALLOWED_IPS (loopback by default) may scrape."""
    from agentcal import metrics as agentcal_metrics

    token = settings.METRICS_TOKEN
    if token:
        presented = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(presented.encode(), token.encode()):
            return HttpResponse("metrics: bad or missing token\n", status=401, content_type="text/plain")
    elif request.META.get("REMOTE_ADDR") not in settings.METRICS_ALLOWED_IPS:
        return HttpResponse("metrics: not from an allowed address\n", status=403, content_type="text/plain")
    return HttpResponse(agentcal_metrics.render(), content_type=CONTENT_TYPE_LATEST)
