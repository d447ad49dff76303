"""A Microsoft Graph calendar client and the Microsoft identity platform's OAuth 2.0 authorization code flow
(with PKCE) for it: calendars, calendarView delta, event writes and change-notification subscriptions.

Plain httpx, like sync/providers/caldav_client.py: the sync engine decides from the exact status, error
code and Retry-After of every answer. Base URLs are parameters so settings (and the tests) can point them
elsewhere: the authority is https://login.microsoftonline.com, the API https://graph.microsoft.com/v1.0.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

from agentcal.retry_after import retry_after_seconds
from sync.providers.client_base import UpstreamClient
from sync.providers.errors import (
    GrantRevoked,
    NotFound,
    SyncTokenRefused,
    Throttled,
    Unauthorized,
    Unavailable,
    UpstreamError,
)

# Least privilege: offline_access for a refresh token, Calendars.ReadWrite for /me/calendars, delta and
# writes. User.Read is not needed: a calendar's `owner` already names the mailbox.
GRAPH_SCOPES = "offline_access Calendars.ReadWrite"
# learn.microsoft.com/graph/api/resources/subscription ("Subscription lifetime"): Outlook message, event
# and contact subscriptions without resource data last at most 10,080 minutes (under 7 days). Older
# versions of that page said 4,230 minutes; the fake enforces this value.
MAX_SUBSCRIPTION_MINUTES = 10080
MAX_RESPONSE_BYTES = 20 * 1024 * 1024
DELTA_PAGE_SIZE = 100  # Prefer: odata.maxpagesize; Graph may send fewer
MAX_CALENDAR_PAGES = 100
# Codes with which a delta link is refused. Outlook answers an expired one with 410 Gone and
# SyncStateNotFound; the delta query overview documents 400 syncStateNotFound for directory resources and
# resyncRequired among Graph's error codes. Any 410 on a delta request counts, whatever its code.
DELTA_REFUSED_CODES = {"syncstatenotfound", "resyncrequired", "syncstateinvalid"}
# transactionId is a uuid5 of the booking id: the create-event example uses a GUID; no maximum length is
# documented (learn.microsoft.com/graph/api/resources/event).
_TRANSACTION_NAMESPACE = uuid.UUID("6f1c8d3e-2b7a-5c4e-9a0d-3e8f1b2c4d5a")


@dataclass(frozen=True)
class Tokens:
    access_token: str
    refresh_token: str | None
    expires_at: datetime
    scope: str


@dataclass(frozen=True)
class RemoteCalendar:
    id: str
    name: str
    is_default: bool
    can_edit: bool
    owner: str = ""  # the mailbox's address (`owner.address`)


@dataclass(frozen=True)
class DeltaPage:
    items: list[dict[str, Any]]
    next_link: str | None
    delta_link: str | None


@dataclass(frozen=True)
class Subscription:
    id: str
    expiration: datetime


def transaction_id_for(booking_id: str) -> str:
    """The transactionId of the event a booking writes: the same for every retry of that booking's create."""
    return str(uuid.uuid5(_TRANSACTION_NAMESPACE, booking_id))


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge), RFC 7636."""
    verifier = secrets.token_urlsafe(64)  # 86 characters of the unreserved set
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def authorization_url(
    *,
    authority_url: str,
    tenant: str,
    client_id: str,
    redirect_uri: str,
    state: str,
    code_challenge: str,
    scope: str = GRAPH_SCOPES,
) -> str:
    query = urlencode(
        {
            "client_id": client_id,
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "response_mode": "query",
            "scope": scope,
            "state": state,
            "code_challenge": code_challenge,
            "code_challenge_method": "S256",
        }
    )
    return f"{_endpoint(authority_url, tenant)}/authorize?{query}"


def exchange_code(
    *,
    authority_url: str,
    tenant: str,
    client_id: str,
    client_secret: str,
    code: str,
    code_verifier: str,
    redirect_uri: str,
    scope: str = GRAPH_SCOPES,
    transport: httpx.BaseTransport | None = None,
) -> Tokens:
    form = {"grant_type": "authorization_code", "code": code, "code_verifier": code_verifier}
    form |= {"redirect_uri": redirect_uri, "scope": scope}
    return _token_request(authority_url, tenant, client_id, client_secret, form, None, transport)


def refresh(
    *,
    authority_url: str,
    tenant: str,
    client_id: str,
    client_secret: str,
    refresh_token: str,
    scope: str = GRAPH_SCOPES,
    transport: httpx.BaseTransport | None = None,
) -> Tokens:
    """New tokens; the old refresh token is kept when the answer brings none."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "scope": scope}
    return _token_request(authority_url, tenant, client_id, client_secret, form, refresh_token, transport)


def _endpoint(authority_url: str, tenant: str) -> str:
    return f"{authority_url.rstrip('/')}/{quote(tenant, safe='')}/oauth2/v2.0"


def _token_request(
    authority_url: str,
    tenant: str,
    client_id: str,
    client_secret: str,
    form: dict[str, str],
    old_refresh_token: str | None,
    transport: httpx.BaseTransport | None,
) -> Tokens:
    hidden = [client_secret, *(form.get(key, "") for key in ("code", "code_verifier", "refresh_token"))]
    with _Http(10.0, transport, {}, hidden) as http:
        body = http.call(
            "POST", f"{_endpoint(authority_url, tenant)}/token", "token",
            data={"client_id": client_id, "client_secret": client_secret, **form},
        )  # fmt: skip
    try:
        expires_in, access_token = int(body.get("expires_in", 0)), str(body["access_token"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UpstreamError(f"token: malformed answer ({type(exc).__name__})") from exc
    return Tokens(
        access_token=access_token,
        refresh_token=body.get("refresh_token") or old_refresh_token,
        expires_at=datetime.now(UTC) + timedelta(seconds=expires_in),
        scope=str(body.get("scope", "")),
    )


class GraphCalendarClient(UpstreamClient):
    def __init__(
        self,
        access_token: str,
        *,
        api_url: str,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self._origin = urlsplit(self.api_url)[:2]
        self._http = _Http(timeout, transport, {"Authorization": f"Bearer {access_token}"}, [access_token])

    def close(self) -> None:
        self._http.close()

    @property
    def calls(self) -> int:
        return self._http.calls

    def calendars(self) -> list[RemoteCalendar]:
        found: list[RemoteCalendar] = []
        url: str | None = f"{self.api_url}/me/calendars"
        for _ in range(MAX_CALENDAR_PAGES):
            if url is None:
                return found
            body = self._http.call("GET", self._own(url), "calendars")
            found += [
                RemoteCalendar(str(c["id"]), str(c.get("name", "")), bool(c.get("isDefaultCalendar")),
                               bool(c.get("canEdit")), str((c.get("owner") or {}).get("address") or ""))
                for c in body.get("value", [])
            ]  # fmt: skip
            url = body.get("@odata.nextLink")
        raise UpstreamError(f"calendars: more than {MAX_CALENDAR_PAGES} pages")

    def delta_page(self, calendar_id: str, *, start: datetime, end: datetime, link: str | None) -> DeltaPage:
        """One page of calendarView delta: the first page of a full listing of the instances (occurrences,
        not series masters) between start and end when `link` is None, else the page `link` (a next_link,
        or a stored delta_link) names. Exactly one of next_link (more pages in this round) and delta_link
        (round over; changes since come from it) is set."""
        prefer = {"Prefer": f"odata.maxpagesize={DELTA_PAGE_SIZE}"}
        if link is None:
            url = f"{self._path('me/calendars', calendar_id)}/calendarView/delta"
            window = {"startDateTime": _iso(start), "endDateTime": _iso(end)}
            body = self._http.call("GET", url, "delta", headers=prefer, params=window)
        else:
            body = self._http.call("GET", self._own(link), "delta", headers=prefer, sent_link=True)
        next_link, delta_link = body.get("@odata.nextLink"), body.get("@odata.deltaLink")
        if (next_link is None) == (delta_link is None):
            raise UpstreamError("delta: the answer carries not exactly one of nextLink and deltaLink")
        return DeltaPage(list(body.get("value", [])), next_link, delta_link)

    def create(self, calendar_id: str, event: dict[str, Any]) -> dict[str, Any]:
        """Creates the event; sent again with the same transactionId, Graph returns the event it made."""
        if not event.get("transactionId"):
            raise ValueError("an event we create carries a transactionId (transaction_id_for)")
        return self._http.call(
            "POST", f"{self._path('me/calendars', calendar_id)}/events", "create", json=event
        )

    def update(self, event_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self._http.call("PATCH", self._path("me/events", event_id), "update", json=changes)

    def delete(self, event_id: str) -> bool:
        """True if this call deleted the event, False if it was already gone."""
        try:
            self._http.call("DELETE", self._path("me/events", event_id), "delete")
        except NotFound:
            return False
        return True

    def subscribe(
        self,
        *,
        resource: str,
        notification_url: str,
        lifecycle_url: str,
        client_state: str,
        expiration: datetime,
    ) -> Subscription:
        """Graph first checks both URLs (each must echo a validationToken) and refuses with 400 if not."""
        body = {
            "changeType": "created,updated,deleted",
            "resource": resource,
            "notificationUrl": notification_url,
            "lifecycleNotificationUrl": lifecycle_url,
            "clientState": client_state,
            "expirationDateTime": _iso(expiration),
        }
        return _subscription(self._http.call("POST", f"{self.api_url}/subscriptions", "subscribe", json=body))

    def renew(self, subscription_id: str, expiration: datetime) -> Subscription:
        change = {"expirationDateTime": _iso(expiration)}
        return _subscription(
            self._http.call("PATCH", self._path("subscriptions", subscription_id), "renew", json=change)
        )

    def unsubscribe(self, subscription_id: str) -> None:
        self._http.call("DELETE", self._path("subscriptions", subscription_id), "unsubscribe")

    def _path(self, collection: str, item_id: str) -> str:
        return f"{self.api_url}/{collection}/{quote(item_id, safe='')}"

    def _own(self, link: str) -> str:
        """Links from answers would carry our bearer token along: only ever to the API's own origin."""
        if urlsplit(link)[:2] != self._origin:
            raise UpstreamError("a link in the answer points away from the Graph API: not followed")
        return link


class _Http:
    """httpx with bounded reads, a call count and the one mapping from answers to errors."""

    def __init__(
        self,
        timeout: float,
        transport: httpx.BaseTransport | None,
        headers: dict[str, str],
        hidden: list[str],
    ) -> None:
        # Redirects are never followed (they would carry the bearer token along); proxy settings from the
        # environment would choose the address instead of the caller's transport.
        self._client = httpx.Client(
            timeout=timeout, transport=transport, follow_redirects=False, trust_env=False,
            headers={"User-Agent": "AgentCal", "Accept": "application/json", **headers},
        )  # fmt: skip
        self._hidden = [secret for secret in hidden if secret]
        self.calls = 0

    def __enter__(self) -> _Http:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def call(
        self, method: str, url: str, during: str, *, sent_link: bool = False, **kwargs: Any
    ) -> dict[str, Any]:
        """The JSON object answered ({} for an empty body), or the error the answer maps to."""
        self.calls += 1
        where = f"{during} {urlsplit(url).path}"  # the query may hold delta or skip tokens: left out
        try:
            with self._client.stream(method, url, **kwargs) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise UpstreamError(f"{where}: response over {MAX_RESPONSE_BYTES} bytes")
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise Unavailable(self._redact(f"{where}: {type(exc).__name__}: {exc}")) from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(self._redact(f"{where}: {type(exc).__name__}: {exc}")) from exc
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            parsed = None
        if not 200 <= response.status_code < 300:
            raise self._error(response, parsed, where, during, sent_link)
        if not isinstance(parsed, dict):
            raise UpstreamError(f"{where}: the answer is not a JSON object", status=response.status_code)
        return parsed

    def _error(
        self, response: httpx.Response, parsed: Any, where: str, during: str, sent_link: bool
    ) -> UpstreamError:
        """Graph errors are {"error": {"code", "message"}}, the token endpoint's {"error": "invalid_grant",
        "error_description"} (whose AADSTS text is left out: the code suffices)."""
        status = response.status_code
        error = parsed.get("error") if isinstance(parsed, dict) else None
        code = str(error.get("code", "")) if isinstance(error, dict) else str(error or "")
        detail = str(error.get("message", ""))[:200] if isinstance(error, dict) else ""
        message = self._redact(f"{where}: HTTP {status} {code}".rstrip() + (f": {detail}" if detail else ""))
        retry_after = retry_after_seconds(response.headers.get("Retry-After"))
        kind: type[UpstreamError] = UpstreamError
        if during == "token" and code == "invalid_grant":
            kind = GrantRevoked
        elif status == 401:
            kind = Unauthorized
        elif sent_link and (status == 410 or (status == 400 and code.lower() in DELTA_REFUSED_CODES)):
            kind = SyncTokenRefused
        elif status == 429 or (status == 503 and retry_after is not None):
            kind = Throttled
        elif status == 404:
            kind = NotFound
        elif status == 408 or status >= 500:
            kind = Unavailable
        return kind(message, status=status, reason=code, retry_after=retry_after)

    def _redact(self, message: str) -> str:
        for secret in self._hidden:
            message = message.replace(secret, "***")
        return message


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("pass an aware datetime")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _subscription(body: dict[str, Any]) -> Subscription:
    try:
        expiration = datetime.fromisoformat(
            str(body["expirationDateTime"])
        )  # 7 fraction digits: fine in 3.11
    except (KeyError, ValueError) as exc:
        raise UpstreamError(f"subscription: malformed answer ({type(exc).__name__})") from exc
    return Subscription(
        str(body.get("id", "")), expiration if expiration.tzinfo else expiration.replace(tzinfo=UTC)
    )
