"""OAuth-connected providers (Google Calendar, Microsoft 365): the app registered with each provider,
the authorization-code flow with PKCE, and fresh access tokens.

Tokens live in the connection's sealed secret (sync.credentials) as `{access_token, refresh_token,
expires_at}`. An access token is refreshed shortly before it expires, under the connection's row
lock so two runs never spend the same refresh token; a refused refresh (the grant was revoked) marks
the connection revoked and is never retried until someone connects again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction

from agentcal.clock import isoformat_z
from agentcal.errors import InvalidRequest
from sync.credentials import seal, unseal
from sync.models import Connection, Provider
from sync.providers import google_client as google
from sync.providers import microsoft_client as microsoft
from sync.providers.errors import GrantRevoked

# Refresh an access token this long before it expires (a sync run must not start with a token that
# dies halfway through).
REFRESH_MARGIN = timedelta(minutes=5)


@dataclass(frozen=True)
class Grant:
    access_token: str
    refresh_token: str | None
    expires_at: datetime


@dataclass(frozen=True)
class CalendarChoice:
    id: str
    name: str
    primary: bool
    account: str  # the address of the account it belongs to, as shown to people


class OAuthApp(Protocol):
    provider: str
    label: str

    def configured(self) -> bool: ...
    def authorization_origin(self) -> str: ...
    def authorization_url(self, *, state: str, code_challenge: str, redirect_uri: str) -> str: ...
    def exchange(self, *, code: str, code_verifier: str, redirect_uri: str) -> Grant: ...
    def refresh(self, refresh_token: str) -> Grant: ...
    def calendars(self, access_token: str) -> list[CalendarChoice]: ...


class GoogleApp:
    provider = Provider.GOOGLE.value
    label = "Google Calendar"

    def configured(self) -> bool:
        return bool(settings.SYNC_GOOGLE_CLIENT_ID and settings.SYNC_GOOGLE_CLIENT_SECRET)

    def authorization_origin(self) -> str:
        return _origin(settings.SYNC_GOOGLE_AUTH_URL)

    def authorization_url(self, *, state: str, code_challenge: str, redirect_uri: str) -> str:
        return google.authorization_url(
            auth_url=settings.SYNC_GOOGLE_AUTH_URL,
            client_id=settings.SYNC_GOOGLE_CLIENT_ID,
            redirect_uri=redirect_uri,
            state=state,
            code_challenge=code_challenge,
        )

    def exchange(self, *, code: str, code_verifier: str, redirect_uri: str) -> Grant:
        tokens = google.exchange_code(
            token_url=settings.SYNC_GOOGLE_TOKEN_URL,
            client_id=settings.SYNC_GOOGLE_CLIENT_ID,
            client_secret=settings.SYNC_GOOGLE_CLIENT_SECRET,
            code=code,
            code_verifier=code_verifier,
            redirect_uri=redirect_uri,
        )
        return Grant(tokens.access_token, tokens.refresh_token, tokens.expires_at)

    def refresh(self, refresh_token: str) -> Grant:
        tokens = google.refresh(
            token_url=settings.SYNC_GOOGLE_TOKEN_URL,
            client_id=settings.SYNC_GOOGLE_CLIENT_ID,
            client_secret=settings.SYNC_GOOGLE_CLIENT_SECRET,
            refresh_token=refresh_token,
        )
        return Grant(tokens.access_token, tokens.refresh_token, tokens.expires_at)

    def calendars(self, access_token: str) -> list[CalendarChoice]:
        with google.GoogleCalendarClient(access_token, api_url=settings.SYNC_GOOGLE_API_URL) as client:
            found = client.calendars()
        writable = [c for c in found if c.access_role in ("owner", "writer")]
        # A Google account's primary calendar has the account's address as its id.
        account = next((c.id for c in found if c.primary), "")
        return [CalendarChoice(c.id, c.summary, c.primary, account) for c in writable]


class MicrosoftApp:
    """An app registered in Microsoft Entra (the identity platform's v2.0 endpoints, for the tenant in
    SYNC_MICROSOFT_TENANT: `common` takes work, school and personal accounts)."""

    provider = Provider.MICROSOFT.value
    label = "Microsoft 365"

    def configured(self) -> bool:
        return bool(settings.SYNC_MICROSOFT_CLIENT_ID and settings.SYNC_MICROSOFT_CLIENT_SECRET)

    def authorization_origin(self) -> str:
        return _origin(settings.SYNC_MICROSOFT_AUTHORITY_URL)

    def authorization_url(self, *, state: str, code_challenge: str, redirect_uri: str) -> str:
        return microsoft.authorization_url(
            authority_url=settings.SYNC_MICROSOFT_AUTHORITY_URL,
            tenant=settings.SYNC_MICROSOFT_TENANT,
            client_id=settings.SYNC_MICROSOFT_CLIENT_ID,
            redirect_uri=redirect_uri,
            state=state,
            code_challenge=code_challenge,
        )

    def exchange(self, *, code: str, code_verifier: str, redirect_uri: str) -> Grant:
        tokens = microsoft.exchange_code(
            authority_url=settings.SYNC_MICROSOFT_AUTHORITY_URL,
            tenant=settings.SYNC_MICROSOFT_TENANT,
            client_id=settings.SYNC_MICROSOFT_CLIENT_ID,
            client_secret=settings.SYNC_MICROSOFT_CLIENT_SECRET,
            code=code,
            code_verifier=code_verifier,
            redirect_uri=redirect_uri,
        )
        return Grant(tokens.access_token, tokens.refresh_token, tokens.expires_at)

    def refresh(self, refresh_token: str) -> Grant:
        tokens = microsoft.refresh(
            authority_url=settings.SYNC_MICROSOFT_AUTHORITY_URL,
            tenant=settings.SYNC_MICROSOFT_TENANT,
            client_id=settings.SYNC_MICROSOFT_CLIENT_ID,
            client_secret=settings.SYNC_MICROSOFT_CLIENT_SECRET,
            refresh_token=refresh_token,
        )
        return Grant(tokens.access_token, tokens.refresh_token, tokens.expires_at)

    def calendars(self, access_token: str) -> list[CalendarChoice]:
        with microsoft.GraphCalendarClient(access_token, api_url=settings.SYNC_MICROSOFT_API_URL) as client:
            found = client.calendars()
        # Only calendars our bookings can be written to (shared read-only ones, birthdays, holidays: not).
        return [CalendarChoice(c.id, c.name, c.is_default, c.owner) for c in found if c.can_edit]


_APPS: dict[str, OAuthApp] = {Provider.GOOGLE: GoogleApp(), Provider.MICROSOFT: MicrosoftApp()}


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def oauth_apps() -> list[OAuthApp]:
    """The OAuth providers this installation has an app registered for."""
    return [app for app in _APPS.values() if app.configured()]


def app_for(provider: str) -> OAuthApp:
    app = _APPS.get(provider)
    if app is None or not app.configured():
        raise InvalidRequest(
            f"{provider} is not set up on this installation (see README, Upstream calendars)."
        )
    return app


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge), RFC 7636: the same for every provider."""
    return google.pkce_pair()


def seal_grant(grant: Grant) -> str:
    return seal(
        {
            "access_token": grant.access_token,
            "refresh_token": grant.refresh_token,
            "expires_at": isoformat_z(grant.expires_at),
        }
    )


def fresh_access_token(connection: Connection, *, force: bool = False) -> str:
    """An access token valid for a while yet, refreshed if need be (`force`: the provider refused the
    current one before its time). Raises GrantRevoked."""
    grant = grant_from_secret(connection.secret)
    if not force and grant.expires_at - datetime.now(UTC) > REFRESH_MARGIN:
        return grant.access_token
    with transaction.atomic():
        locked = Connection.objects.select_for_update().get(pk=connection.pk)
        fresh = grant_from_secret(locked.secret)  # another run may have refreshed it meanwhile
        refreshed_meanwhile = fresh.access_token != grant.access_token
        if (refreshed_meanwhile or not force) and fresh.expires_at - datetime.now(UTC) > REFRESH_MARGIN:
            return fresh.access_token
        grant = fresh
        if not grant.refresh_token:
            raise GrantRevoked("no refresh token was granted")
        renewed = app_for(locked.provider).refresh(grant.refresh_token)
        if renewed.refresh_token is None:
            renewed = Grant(renewed.access_token, grant.refresh_token, renewed.expires_at)
        Connection.objects.filter(pk=locked.pk).update(secret=seal_grant(renewed))
        connection.secret = seal_grant(renewed)
    return renewed.access_token


def grant_from_secret(secret: str) -> Grant:
    data = unseal(secret)
    return Grant(
        access_token=str(data["access_token"]),
        refresh_token=data.get("refresh_token"),
        expires_at=datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00")),
    )
