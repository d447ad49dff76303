"""Magic links: single-use, hashed at rest, throttled per address. Sign-in (accounts.services) and team
invitations (accounts.team) both send them; redeeming one is sign-in's job."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models.functions import Now
from django.utils import timezone

from accounts.models import Invitation, MagicLink
from accounts.people import normalize_email

# At most MAX_LINKS_PER_EMAIL links to one address per THROTTLE_WINDOW, whoever asks for them.
THROTTLE_WINDOW = timedelta(minutes=15)
MAX_LINKS_PER_EMAIL = 5


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def magic_link_issue(
    *, email: str, invitation: Invitation | None = None, ttl: timedelta | None = None
) -> str:
    """Create a link and return its raw token: for an existing person (create_owner), or one that
    accepts `invitation` (accounts.team). Expires after `ttl`, by default MAGIC_LINK_TTL_SECONDS."""
    token = secrets.token_urlsafe(32)
    MagicLink.objects.create(
        email=normalize_email(email),
        token_hash=token_hash(token),
        invitation=invitation,
        expires_at=timezone.now() + (ttl or timedelta(seconds=settings.MAGIC_LINK_TTL_SECONDS)),
    )
    return token


def magic_link_url(token: str) -> str:
    return f"{settings.DASHBOARD_BASE_URL}/auth/magic/{token}"


def links_throttled_for(email: str) -> bool:
    """Have enough links gone to this address within THROTTLE_WINDOW that no more may (sign-in links
    and team invitations alike)?"""
    since = timezone.now() - THROTTLE_WINDOW
    return MagicLink.objects.filter(email=email, created_at__gte=since).count() >= MAX_LINKS_PER_EMAIL


def live_links(token: str) -> Any:
    """The unused, unexpired links with this token (by the database clock)."""
    return MagicLink.objects.filter(token_hash=token_hash(token), used_at__isnull=True, expires_at__gt=Now())


def magic_links_purge(*, older_than: timedelta = timedelta(days=7)) -> int:
    """Delete used and expired links past `older_than` (the throttles only look back 15 minutes)."""
    deleted, _ = MagicLink.objects.filter(created_at__lt=timezone.now() - older_than).delete()
    return deleted
