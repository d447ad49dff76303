"""Error pages: problem+json for the agent API, HTML for people."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

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
