"""Sign-in pages and the JSON endpoints the passkey script talks to. Views parse, call, render."""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from webauthn.helpers import bytes_to_base64url

from accounts import services
from accounts.models import Passkey
from accounts.time_zones import person_time_zone_set, remember_in_session
from agentcal.errors import SignInFailed
from agentcal.rate_limits import limiter_for
from agentcal.text import is_storable

_REG_CHALLENGE = "webauthn_registration_challenge"
_AUTH_CHALLENGE = "webauthn_authentication_challenge"
MAX_CEREMONY_BODY = 64 * 1024


def _person(request: HttpRequest) -> Any:
    """The signed-in person (views using it are behind login_required)."""
    return request.user


def _client_ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR")


@require_GET
def sign_in(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("dashboard:home")
    return render(request, "accounts/sign_in.html", {"next": request.GET.get("next", "")})


@require_POST
def magic_link_request(request: HttpRequest) -> HttpResponse:
    email = request.POST.get("email", "")
    # An address PostgreSQL cannot compare (a NUL character) is no one's: the same answer, and no look-up.
    if "@" in email and len(email) <= 254 and is_storable(email):
        services.magic_link_request(email=email, ip=_client_ip(request))
    # The same answer whether or not the address exists.
    return render(request, "accounts/magic_link_sent.html", {"email": email[:254]})


def magic_link_redeem(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows a button; only the POST uses the link, so mail scanners that fetch links don't. A link
    that is used up or expired says so before any button, with a way to ask for a new one."""
    if request.method == "GET":
        state = services.magic_link_state(token=token)
        if state != services.MagicLinkState.LIVE:
            return render(
                request,
                "accounts/magic_link_confirm.html",
                {"token": token, "state": state.value},
                status=404 if state == services.MagicLinkState.UNKNOWN else 410,
            )
        invitation = services.magic_link_invitation(token=token)
        return render(
            request,
            "accounts/magic_link_confirm.html",
            {"token": token, "invitation": invitation, "state": state.value},
        )
    if request.method != "POST":
        return HttpResponse(status=405)
    try:
        signed_in = services.magic_link_redeem(token=token)
    except SignInFailed as exc:
        return render(request, "accounts/sign_in.html", {"error": str(exc)}, status=400)
    user = signed_in.user
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    if signed_in.joined is not None:
        messages.success(request, f"Welcome to {signed_in.joined.name}.")
    if not user.passkeys.exists():
        return redirect("accounts:passkeys")  # first sign-in: ask for a passkey
    if signed_in.joined is not None:
        return redirect("dashboard:approvals", signed_in.joined.slug)
    return redirect("dashboard:home")


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    logout(request)
    return redirect("accounts:sign_in")


@require_POST
@login_required
def sign_out_everywhere(request: HttpRequest) -> HttpResponse:
    services.sign_out_everywhere(_person(request))
    logout(request)
    return redirect("accounts:sign_in")


# --- Passkeys ----------------------------------------------------------------------------------------------


@login_required
def passkeys(request: HttpRequest) -> HttpResponse:
    keys = _person(request).passkeys.order_by("created_at")
    return render(request, "accounts/passkeys.html", {"passkeys": keys, "section": "passkeys"})


@require_POST
@login_required
def time_zone_set(request: HttpRequest) -> HttpResponse:
    """The browser's own IANA zone (JSON `{"time_zone": …}`), posted by the dashboard's script when it
    differs from the stored one: moments render in it from the next page on."""
    try:
        name = _json_body(request).get("time_zone")
    except SignInFailed as exc:
        return _problem(str(exc))
    if not isinstance(name, str) or not person_time_zone_set(user=_person(request), name=name):
        return _problem("Unknown IANA time zone.")
    remember_in_session(request, name)
    return HttpResponse(status=204)


@require_POST
@login_required
def passkey_rename(request: HttpRequest, passkey_id: int) -> HttpResponse:
    passkey = get_object_or_404(Passkey, pk=passkey_id, user=request.user)
    name = services.passkey_name(request.POST.get("name", ""))
    if name:
        passkey.name = name
        passkey.save(update_fields=["name"])
    else:
        messages.error(request, f"A passkey needs a name: “{passkey.name}” keeps its own.")
    return redirect("accounts:passkeys")


@require_POST
@login_required
def passkey_delete(request: HttpRequest, passkey_id: int) -> HttpResponse:
    passkey = get_object_or_404(Passkey, pk=passkey_id, user=request.user)
    if _person(request).passkeys.count() <= 1:
        messages.error(request, "You cannot remove your last passkey: you would have no way to sign in.")
    else:
        passkey.delete()
        messages.success(request, f"Removed “{passkey.name}”.")
    return redirect("accounts:passkeys")


def _json_body(request: HttpRequest) -> dict[str, Any]:
    if len(request.body) > MAX_CEREMONY_BODY:
        raise SignInFailed("The request is too large.")
    try:
        body = json.loads(request.body or b"{}")
    except ValueError as exc:
        raise SignInFailed("The request is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise SignInFailed("The request must be a JSON object.")
    return body


MAX_OUTSTANDING_CHALLENGES = 5


def _remember_challenge(request: HttpRequest, key: str, challenge: bytes) -> None:
    # Several ceremonies may be in flight (the autofill request and a button press); keep a few.
    outstanding = request.session.get(key, [])[-(MAX_OUTSTANDING_CHALLENGES - 1) :]
    request.session[key] = [*outstanding, bytes_to_base64url(challenge)]


def _take_challenge(request: HttpRequest, key: str, credential: Any) -> bytes:
    """The session challenge this credential answers (each usable once)."""
    presented = services.challenge_in(credential)
    outstanding = request.session.get(key, [])
    if presented not in outstanding:
        raise SignInFailed("The sign-in ceremony expired; try again.")
    outstanding.remove(presented)
    request.session[key] = outstanding
    return services.challenge_from_session(presented)


def _problem(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


@require_POST
@login_required
def passkey_registration_options(request: HttpRequest) -> HttpResponse:
    options_json, challenge = services.passkey_registration_options(_person(request))
    _remember_challenge(request, _REG_CHALLENGE, challenge)
    return HttpResponse(options_json, content_type="application/json")


@require_POST
@login_required
def passkey_registration_verify(request: HttpRequest) -> HttpResponse:
    try:
        body = _json_body(request)
        credential = body.get("credential") or {}
        challenge = _take_challenge(request, _REG_CHALLENGE, credential)
        passkey = services.passkey_register(
            user=request.user,
            credential=credential,
            challenge=challenge,
            name=str(body.get("name") or ""),
        )
    except SignInFailed as exc:
        return _problem(str(exc))
    return JsonResponse({"id": passkey.pk, "name": passkey.name}, status=201)


@require_POST
def passkey_authentication_options(request: HttpRequest) -> HttpResponse:
    # Reachable without signing in, and remembering the challenge writes a session row: without a
    # per-peer budget every request from a cookieless client would leave one more row behind.
    if not limiter_for("PASSKEY_SIGN_INS_PER_MINUTE_PER_IP").allow(str(_client_ip(request))):
        response = _problem("Too many sign-in attempts from this address; try again in a minute.", status=429)
        response["Retry-After"] = str(math.ceil(60 / settings.PASSKEY_SIGN_INS_PER_MINUTE_PER_IP))
        return response
    options_json, challenge = services.passkey_authentication_options()
    _remember_challenge(request, _AUTH_CHALLENGE, challenge)
    return HttpResponse(options_json, content_type="application/json")


@require_POST
def passkey_authentication_verify(request: HttpRequest) -> HttpResponse:
    try:
        body = _json_body(request)
        credential = body.get("credential") or {}
        challenge = _take_challenge(request, _AUTH_CHALLENGE, credential)
        result = services.passkey_authenticate(credential=credential, challenge=challenge)
    except SignInFailed as exc:
        return _problem(str(exc))
    login(request, result.user, backend="django.contrib.auth.backends.ModelBackend")
    # The browser's zone comes along, so the very first page already reads in it.
    zone = body.get("time_zone")
    if isinstance(zone, str) and person_time_zone_set(user=result.user, name=zone):
        remember_in_session(request, zone)
    return JsonResponse({"redirect": _safe_next(request, body.get("next"))})


def _safe_next(request: HttpRequest, candidate: Any) -> str:
    from django.urls import reverse
    from django.utils.http import url_has_allowed_host_and_scheme

    if (
        isinstance(candidate, str)
        and candidate
        and url_has_allowed_host_and_scheme(
            candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    ):
        return candidate
    return reverse("dashboard:home")
