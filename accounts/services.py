"""Sign-in: asking for and redeeming magic links (accounts.links makes them) and passkeys (WebAuthn)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import models, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import base64url_to_bytes, parse_authentication_credential_json
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, InvalidRegistrationResponse
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from accounts.links import (
    THROTTLE_WINDOW,
    links_throttled_for,
    live_links,
    magic_link_url,
    token_hash,
)
from accounts.models import Invitation, MagicLink, Passkey
from accounts.people import normalize_email
from accounts.team import invitation_accept
from accounts.time_zones import zone_for_email
from agentcal.errors import SignInFailed
from agentcal.moments import moment_text
from agentcal.text import storable_text
from workspaces.models import Workspace

logger = logging.getLogger(__name__)
User = get_user_model()

# Per client IP, over the same window as the per-address throttle (accounts.links.THROTTLE_WINDOW).
MAX_LINKS_PER_IP = 20


# --- Sessions -------------------------------------------------------------------------------------------


def sign_out_everywhere(user: Any) -> None:
    """Invalidate every session of this person: Django ties sessions to a hash of the password
    field, and a fresh unusable password changes it."""
    user.set_unusable_password()
    user.save(update_fields=["password"])


# --- Magic links -----------------------------------------------------------------------------------------


def magic_link_request(*, email: str, ip: str | None) -> None:
    """Email a sign-in link if the address has an account. Answers the same in every case, so it
    never reveals whether an address exists, and silently stops past the throttles."""
    email = normalize_email(email)
    if links_throttled_for(email):
        logger.info("magic link throttled for an address")
        return
    since = timezone.now() - THROTTLE_WINDOW
    if ip and MagicLink.objects.filter(requested_ip=ip, created_at__gte=since).count() >= MAX_LINKS_PER_IP:
        logger.info("magic link throttled for ip %s", ip)
        return
    if not User.objects.filter(email=email, is_active=True).exists():
        # Record the attempt anyway: the per-IP throttle must count probes for unknown addresses.
        MagicLink.objects.create(
            email=email,
            token_hash=token_hash(secrets.token_urlsafe(32)),
            requested_ip=ip,
            expires_at=timezone.now() + timedelta(seconds=1),
            used_at=timezone.now(),
        )
        return
    token = secrets.token_urlsafe(32)
    link = MagicLink.objects.create(
        email=email,
        token_hash=token_hash(token),
        requested_ip=ip,
        expires_at=timezone.now() + timedelta(seconds=settings.MAGIC_LINK_TTL_SECONDS),
    )
    minutes = settings.MAGIC_LINK_TTL_SECONDS // 60
    expires = moment_text(link.expires_at, zone_for_email(email))
    try:
        send_mail(
            subject="Your AgentCal sign-in link",
            message=(
                f"Use this link to sign in to AgentCal. It works once and expires in {minutes} minutes "
                f"({expires}):\n\n"
                f"{magic_link_url(token)}\n\nIf you did not ask for it, ignore this email."
            ),
            from_email=None,
            recipient_list=[email],
        )
    except Exception:
        logger.exception("could not send a magic link email")


@dataclass(frozen=True)
class MagicLinkSignIn:
    user: Any
    joined: Workspace | None = None  # the workspace whose invitation the link accepted


def magic_link_redeem(*, token: str) -> MagicLinkSignIn:
    """Use a link once (CAS on used_at, judged by the database clock) and return its person. A link
    sent with an invitation accepts it in the same transaction, creating the person if need be."""
    expired = SignInFailed("This sign-in link has expired or was already used. Ask for a new one.")
    with transaction.atomic(durable=True):
        link = live_links(token).first()
        if link is None or not live_links(token).filter(pk=link.pk).update(used_at=Now()):
            raise expired
        if link.invitation_id is not None:
            membership = invitation_accept(invitation_id=link.invitation_id)
            return MagicLinkSignIn(user=membership.user, joined=membership.workspace)
        user = User.objects.filter(email=link.email, is_active=True).first()
    if user is None:
        raise expired
    return MagicLinkSignIn(user=user)


class MagicLinkState(models.TextChoices):
    LIVE = "live"
    USED = "used"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


def magic_link_state(*, token: str) -> MagicLinkState:
    """Whether a link would still sign in, judged by the database clock as redeeming it is — so the
    confirm page says "already used" or "expired" up front instead of after the click."""
    link = (
        MagicLink.objects.filter(token_hash=token_hash(token))
        .annotate(lapsed=ExpressionWrapper(Q(expires_at__lte=Now()), output_field=BooleanField()))
        .values("used_at", "lapsed")
        .first()
    )
    if link is None:
        return MagicLinkState.UNKNOWN
    if link["used_at"] is not None:
        return MagicLinkState.USED
    return MagicLinkState.EXPIRED if link["lapsed"] else MagicLinkState.LIVE


def magic_link_invitation(*, token: str) -> Invitation | None:
    """The pending invitation a live link would accept, to name it on the confirm page (using the
    link is the POST's job: mail scanners fetch links)."""
    link = live_links(token).select_related("invitation__workspace").first()
    if link is None or link.invitation is None or not link.invitation.is_pending:
        return None
    return link.invitation


# --- Passkeys ------------------------------------------------------------------------------------------


def user_handle(user: Any) -> bytes:
    """The WebAuthn user handle: stable per person, opaque (no email or id in it)."""
    return hmac.new(
        settings.SECRET_KEY.encode(), f"webauthn-user:{user.pk}".encode(), hashlib.sha256
    ).digest()


def _origin() -> str:
    return settings.DASHBOARD_BASE_URL


def passkey_registration_options(user: Any) -> tuple[str, bytes]:
    """Options JSON for navigator.credentials.create(), and the challenge to keep in the session."""
    options = generate_registration_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        rp_name=settings.WEBAUTHN_RP_NAME,
        user_id=user_handle(user),
        user_name=user.email,
        user_display_name=user.email,
        exclude_credentials=[
            PublicKeyCredentialDescriptor(id=bytes(p.credential_id)) for p in user.passkeys.all()
        ],
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
    )
    return options_to_json(options), options.challenge


def passkey_name(typed: str) -> str:
    """A passkey's name as typed, as PostgreSQL will store it (a NUL character becomes U+FFFD)."""
    return storable_text(typed.strip(), 100)


def passkey_register(*, user: Any, credential: dict[str, Any] | str, challenge: bytes, name: str) -> Passkey:
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=settings.WEBAUTHN_RP_ID,
            expected_origin=_origin(),
            require_user_verification=True,
        )
    except (InvalidRegistrationResponse, ValueError, KeyError, TypeError) as exc:
        raise SignInFailed(f"The passkey could not be verified: {exc}") from exc
    return Passkey.objects.create(
        user=user,
        name=passkey_name(name or "Passkey"),
        credential_id=verified.credential_id,
        public_key=verified.credential_public_key,
        sign_count=verified.sign_count,
        backed_up=bool(verified.credential_backed_up),
    )


def passkey_authentication_options() -> tuple[str, bytes]:
    """Options for a discoverable-credential sign-in (no user named up front; conditional UI works)."""
    options = generate_authentication_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        allow_credentials=[],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return options_to_json(options), options.challenge


@dataclass(frozen=True)
class PasskeySignIn:
    user: Any
    passkey: Passkey


def passkey_authenticate(*, credential: dict[str, Any] | str, challenge: bytes) -> PasskeySignIn:
    try:
        parsed = parse_authentication_credential_json(credential)
    except Exception as exc:  # the browser's JSON is untrusted input
        raise SignInFailed("The passkey response is malformed.") from exc
    passkey = Passkey.objects.select_related("user").filter(credential_id=parsed.raw_id).first()
    if passkey is None or not passkey.user.is_active:
        raise SignInFailed("This passkey is not registered here.")
    handle = parsed.response.user_handle
    if handle is not None and not hmac.compare_digest(handle, user_handle(passkey.user)):
        raise SignInFailed("This passkey belongs to someone else.")
    try:
        verified = verify_authentication_response(
            credential=parsed,
            expected_challenge=challenge,
            expected_rp_id=settings.WEBAUTHN_RP_ID,
            expected_origin=_origin(),
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=True,
        )
    except (InvalidAuthenticationResponse, ValueError) as exc:
        raise SignInFailed(f"The passkey could not be verified: {exc}") from exc
    Passkey.objects.filter(pk=passkey.pk).update(sign_count=verified.new_sign_count, last_used_at=Now())
    return PasskeySignIn(user=passkey.user, passkey=passkey)


def challenge_in(credential: Any) -> str:
    """The challenge (base64url) a browser credential answers, read from its clientDataJSON."""
    try:
        client_data = json.loads(base64url_to_bytes(credential["response"]["clientDataJSON"]))
        return str(client_data["challenge"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SignInFailed("The passkey response is malformed.") from exc


def challenge_from_session(value: str | None) -> bytes:
    if not value:
        raise SignInFailed("The sign-in ceremony expired; try again.")
    return base64url_to_bytes(value)
