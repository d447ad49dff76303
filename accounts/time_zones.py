"""The viewer's own time zone: told by their browser (the dashboard's script posts it when it differs
from the stored one, and passkey sign-in sends it along), kept on their profile, and remembered in the
session so a page costs no extra query. Until a browser has told it, moments read in UTC, labelled so."""

from __future__ import annotations

from collections.abc import Callable
from datetime import tzinfo
from typing import Any

from django.http import HttpRequest, HttpResponse

from accounts.models import Profile
from agentcal.moments import zone_named

SESSION_KEY = "viewer_time_zone"


def person_time_zone(user: Any) -> str:
    """The stored IANA name, or "" when no browser has told it yet."""
    return Profile.objects.filter(user=user).values_list("time_zone", flat=True).first() or ""


def zone_for_email(email: str) -> tzinfo | None:
    """The zone of whoever has this address, for a moment in an email to them (None: UTC)."""
    name = Profile.objects.filter(user__email__iexact=email).values_list("time_zone", flat=True).first()
    return zone_named(name)


def person_time_zone_set(*, user: Any, name: str) -> bool:
    """Store the person's zone; False (and nothing stored) for a name the server does not know."""
    if zone_named(name) is None:
        return False
    Profile.objects.update_or_create(user=user, defaults={"time_zone": name})
    return True


def remember_in_session(request: HttpRequest, name: str) -> None:
    request.session[SESSION_KEY] = name
    request.viewer_zone_name = name  # type: ignore[attr-defined]
    request.viewer_zone = zone_named(name)  # type: ignore[attr-defined]


class ViewerZoneMiddleware:
    """Sets `request.viewer_zone` (a ZoneInfo, or None for "not known yet") and `viewer_zone_name`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        name = ""
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            stored = request.session.get(SESSION_KEY)
            if stored is None:
                stored = person_time_zone(user)
                request.session[SESSION_KEY] = stored
            name = stored
        request.viewer_zone_name = name  # type: ignore[attr-defined]
        request.viewer_zone = zone_named(name)  # type: ignore[attr-defined]
        return self.get_response(request)
