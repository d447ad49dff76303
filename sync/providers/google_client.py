"""A Google Calendar API v3 client and the OAuth 2.0 token calls it needs: the authorization URL with PKCE,
the code exchange, refreshes, the calendar list, incremental event sync, conditional writes and push
channels.

Plain httpx rather than google-api-python-client (~150 MB installed): the sync engine decides what to do
from the exact status, error reason and Retry-After of every answer, and every base URL is a parameter so
that settings can point them at a local fake in tests.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from agentcal.retry_after import retry_after_seconds
from sync.providers.client_base import UpstreamClient
from sync.providers.errors import (
    Conflict,
    GrantRevoked,
    NotFound,
    PreconditionFailed,
    SyncTokenRefused,
    Throttled,
    Unauthorized,
    Unavailable,
    UpstreamError,
)

API_URL = "https://www.googleapis.com/calendar/v3/"
AUTH_URL = "https://accounts.google.com/o/oauth2/v2/auth"
TOKEN_URL = "https://oauth2.googleapis.com/token"
# calendar.events: read and write events on every calendar of the account; calendarList.list accepts none
# of the events scopes, so calendar.readonly (its narrowest sibling that also covers events.watch) comes too.
GOOGLE_SCOPES = (
    "https://www.googleapis.com/auth/calendar.events https://www.googleapis.com/auth/calendar.readonly"
)
MAX_RESPONSE_BYTES = (
    20 * 1024 * 1024
)  # a page of 250 events with long descriptions fits; a hostile stream not
MAX_CALENDAR_PAGES = 100
EVENTS_PAGE_SIZE = 250
# Reasons Google gives a 403 when it means "slow down" (guides/errors): retrying later helps, unlike the
# other 403s (insufficientPermissions, forbiddenForNonOrganizer, requiredAccessLevel…).
RATE_LIMIT_REASONS = frozenset(
    {"rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded", "dailyLimitExceeded"}
)


@dataclass(frozen=True)
class Tokens:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    expires_at: datetime
    scope: str


@dataclass(frozen=True)
class RemoteCalendar:
    id: str
    summary: str
    primary: bool
    access_role: str


@dataclass(frozen=True)
class EventsPage:
    items: list[dict[str, Any]]
    next_page_token: str | None
    next_sync_token: str | None


@dataclass(frozen=True)
class Channel:
    id: str
    resource_id: str
    expiration: datetime


def authorization_url(
    *, auth_url: str, client_id: str, redirect_uri: str, state: str, code_challenge: str,
    scope: str = GOOGLE_SCOPES,
) -> str:  # fmt: skip
    # offline + consent: a refresh token every time, also when the person connected before (Google sends
    # one only on the first consent otherwise).
    query = {
        "client_id": client_id, "redirect_uri": redirect_uri, "response_type": "code", "scope": scope,
        "state": state, "access_type": "offline", "prompt": "consent", "include_granted_scopes": "true",
        "code_challenge": code_challenge, "code_challenge_method": "S256",
    }  # fmt: skip
    return f"{auth_url}?{urlencode(query)}"


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge) per RFC 7636 §4.1–4.2; the verifier holds 512 random bits."""
    verifier = secrets.token_urlsafe(64)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def exchange_code(
    *, token_url: str, client_id: str, client_secret: str, code: str, code_verifier: str, redirect_uri: str,
    transport: httpx.BaseTransport | None = None,
) -> Tokens:  # fmt: skip
    form = {
        "grant_type": "authorization_code", "code": code, "code_verifier": code_verifier,
        "redirect_uri": redirect_uri, "client_id": client_id, "client_secret": client_secret,
    }  # fmt: skip
    return _token_call(token_url, form, None, transport)


def refresh(
    *, token_url: str, client_id: str, client_secret: str, refresh_token: str,
    transport: httpx.BaseTransport | None = None,
) -> Tokens:  # fmt: skip
    form = {
        "grant_type": "refresh_token", "refresh_token": refresh_token,
        "client_id": client_id, "client_secret": client_secret,
    }  # fmt: skip
    return _token_call(token_url, form, refresh_token, transport)


def event_id_for(booking_id: str) -> str:
    """Our event id for a booking: base32hex of its UTF-8 bytes, lowercased, unpadded. Injective and inside
    Google's alphabet for client-supplied ids (a-v, 0-9, 5–1024 characters: events/insert)."""
    event_id = _b32hex(booking_id)
    if not 5 <= len(event_id) <= 1024:
        raise ValueError(f"booking id of {len(booking_id.encode())} bytes gives no valid Google event id")
    return event_id


def booking_id_from(event_id: str) -> str | None:
    """The booking id an `event_id_for` id came from; None for any other id (a person's own events)."""
    try:
        booking_id = base64.b32hexdecode(event_id.upper() + "=" * (-len(event_id) % 8)).decode()
    except (binascii.Error, ValueError):
        return None
    # Decoding forgives stray trailing bits: only an id that encodes back to itself is one of ours.
    return booking_id if len(event_id) >= 5 and _b32hex(booking_id) == event_id else None


def _b32hex(booking_id: str) -> str:
    return base64.b32hexencode(booking_id.encode()).decode("ascii").rstrip("=").lower()


class GoogleCalendarClient(UpstreamClient):
    def __init__(
        self,
        access_token: str,
        *,
        api_url: str,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.api_url = api_url if api_url.endswith("/") else api_url + "/"
        self.calls = 0
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {access_token}", "User-Agent": "AgentCal"},
            timeout=timeout,
            transport=transport,
            follow_redirects=False,  # the token goes nowhere but the configured API
            trust_env=False,  # proxy settings from the environment would bypass the caller's transport
        )

    def close(self) -> None:
        self._http.close()

    def calendars(self) -> list[RemoteCalendar]:
        found: list[RemoteCalendar] = []
        params: dict[str, str] = {"maxResults": "250"}
        for _ in range(MAX_CALENDAR_PAGES):
            page = self._json("GET", "users/me/calendarList", "calendars", params=params)
            found.extend(
                RemoteCalendar(
                    str(entry["id"]),
                    str(entry.get("summaryOverride") or entry.get("summary") or ""),
                    bool(entry.get("primary", False)),
                    str(entry.get("accessRole", "")),
                )  # fmt: skip
                for entry in _items(page, "calendars")
            )
            if not page.get("nextPageToken"):
                return found
            params["pageToken"] = str(page["nextPageToken"])
        raise UpstreamError(f"calendars: more than {MAX_CALENDAR_PAGES} pages")

    def events_page(self, calendar_id: str, *, sync_token: str | None, page_token: str | None) -> EventsPage:
        """One page of a full (no sync_token) or incremental listing. Recurring series come unexpanded: the
        master with `recurrence`, exceptions with `recurringEventId` and `originalStartTime`; deletions as
        `status: cancelled`. The sync token for next time comes only with the last page."""
        params = {"showDeleted": "true", "singleEvents": "false", "maxResults": str(EVENTS_PAGE_SIZE)}
        if sync_token:
            params["syncToken"] = sync_token
        if page_token:
            params["pageToken"] = page_token
        page = self._json(
            "GET", f"{_cal(calendar_id)}/events", "events", params=params, sync=bool(sync_token)
        )
        next_page, next_sync = page.get("nextPageToken"), page.get("nextSyncToken")
        if not (next_page or next_sync):
            raise UpstreamError(
                f"events {_cal(calendar_id)}: a page with neither nextPageToken nor nextSyncToken"
            )
        return EventsPage(_items(page, "events"), next_page or None, None if next_page else next_sync)

    def insert(self, calendar_id: str, event: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", f"{_cal(calendar_id)}/events", "insert", body=event)

    def update(
        self, calendar_id: str, event_id: str, event: dict[str, Any], *, etag: str | None
    ) -> dict[str, Any]:
        headers = {"If-Match": etag} if etag else {}
        return self._json("PUT", _event(calendar_id, event_id), "update", body=event, headers=headers)

    def delete(self, calendar_id: str, event_id: str) -> bool:
        """True if this call deleted the event, False if it was gone already."""
        try:
            self._send("DELETE", _event(calendar_id, event_id), "delete")
        except NotFound:
            return False
        return True

    def get(self, calendar_id: str, event_id: str) -> dict[str, Any] | None:
        """The event as stored (deleted ones may come back as `status: cancelled`); None if unknown."""
        try:
            return self._json("GET", _event(calendar_id, event_id), "get")
        except NotFound:
            return None

    def watch(
        self, calendar_id: str, *, channel_id: str, address: str, token: str, ttl_seconds: int
    ) -> Channel:
        body = {
            "id": channel_id, "type": "web_hook", "address": address, "token": token,
            "params": {"ttl": str(ttl_seconds)},
        }  # fmt: skip
        answer = self._json("POST", f"{_cal(calendar_id)}/events/watch", "watch", body=body)
        try:
            expiration = datetime.fromtimestamp(int(answer["expiration"]) / 1000, UTC)
            return Channel(str(answer["id"]), str(answer["resourceId"]), expiration)
        except (KeyError, TypeError, ValueError) as exc:
            raise UpstreamError(f"watch {_cal(calendar_id)}: malformed channel in answer") from exc

    def stop(self, *, channel_id: str, resource_id: str) -> None:
        """Stops the channel; one that is unknown (stopped or expired already) counts as stopped."""
        with contextlib.suppress(NotFound):
            self._send("POST", "channels/stop", "stop", body={"id": channel_id, "resourceId": resource_id})

    def _json(
        self, method: str, path: str, during: str, *, params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None, headers: dict[str, str] | None = None, sync: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        response = self._send(method, path, during, params=params, body=body, headers=headers, sync=sync)
        return _json_object(response, f"{during} {path}")

    def _send(
        self, method: str, path: str, during: str, *, params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None, headers: dict[str, str] | None = None, sync: bool = False,
    ) -> _Answer:  # fmt: skip
        self.calls += 1
        answer = _request(self._http, method, self.api_url + path, f"{during} {path}", params, body, headers)
        _raise_for(answer, f"{during} {path}", sync=sync)
        return answer


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: httpx.Headers
    body: bytes


def _cal(calendar_id: str) -> str:
    return f"calendars/{quote(calendar_id, safe='')}"


def _event(calendar_id: str, event_id: str) -> str:
    return f"{_cal(calendar_id)}/events/{quote(event_id, safe='')}"


def _request(
    http: httpx.Client, method: str, url: str, during: str, params: dict[str, str] | None,
    body: dict[str, Any] | None, headers: dict[str, str] | None, *, form: dict[str, str] | None = None,
) -> _Answer:  # fmt: skip
    """One bounded exchange. Messages carry `during` (an operation and a path), never the URL's query or
    the request: sync and page tokens, codes and secrets travel there."""
    try:
        with http.stream(method, url, params=params, json=body, data=form, headers=headers) as response:
            content = bytearray()
            for chunk in response.iter_bytes():
                content += chunk
                if len(content) > MAX_RESPONSE_BYTES:
                    raise UpstreamError(f"{during}: response over {MAX_RESPONSE_BYTES} bytes")
    except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        raise Unavailable(f"{during}: {type(exc).__name__}") from exc
    except httpx.HTTPError as exc:
        raise UpstreamError(f"{during}: {type(exc).__name__}") from exc
    return _Answer(response.status_code, response.headers, bytes(content))


def _json_object(answer: _Answer, during: str) -> dict[str, Any]:
    try:
        value = json.loads(answer.body)
    except ValueError as exc:
        raise UpstreamError(f"{during}: the answer is not JSON", status=answer.status) from exc
    if not isinstance(value, dict):
        raise UpstreamError(f"{during}: the answer is not a JSON object", status=answer.status)
    return value


def _items(page: dict[str, Any], during: str) -> list[dict[str, Any]]:
    items = page.get("items", [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise UpstreamError(f"{during}: malformed items")
    return items


def _reason_and_message(body: bytes) -> tuple[str, str]:
    """Google's reason from either error shape: the API's {"error": {"errors": [{"reason"}], "message"}}
    or OAuth's {"error": "invalid_grant", "error_description"}."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return "", ""
    if isinstance(error, str):
        return error[:100], ""  # OAuth's error_description is left out: it may quote what was sent
    if not isinstance(error, dict):
        return "", ""
    details = error.get("errors") or [{}]
    first = details[0] if isinstance(details, list) and isinstance(details[0], dict) else {}
    reason = str(first.get("reason") or error.get("status") or "")[:100]
    return reason, str(error.get("message") or "")[:200]


def _raise_for(answer: _Answer, during: str, *, sync: bool = False, grant: str | None = None) -> None:
    """The one mapping from an answer to an error; returns quietly on 2xx. `grant` names the token
    endpoint's grant_type when the answer came from there: its 400s and 401s are about the grant or the
    client, not an access token."""
    status = answer.status
    if 200 <= status < 300:
        return
    reason, detail = _reason_and_message(answer.body)
    message = (
        f"{during}: HTTP {status}" + (f" {reason}" if reason else "") + (f": {detail}" if detail else "")
    )
    retry_after = retry_after_seconds(answer.headers.get("Retry-After"))
    error: type[UpstreamError] = UpstreamError
    if status == 429 or (status == 403 and reason in RATE_LIMIT_REASONS):
        error = Throttled
    elif status in (408, 500, 502, 503, 504) or status > 504:
        error = Unavailable
    elif grant is not None:
        # A refused authorization code is no revoked grant: only a refresh can find the grant gone.
        revoked = grant == "refresh_token" and status == 400 and reason == "invalid_grant"
        error = GrantRevoked if revoked else UpstreamError
    elif status == 401:
        error = Unauthorized
    elif status == 410 and (sync or reason == "fullSyncRequired"):
        error = SyncTokenRefused
    elif status in (404, 410):
        error = NotFound
    elif status == 409:
        error = Conflict
    elif status == 412:
        error = PreconditionFailed
    raise error(message, status=status, reason=reason, retry_after=retry_after)


def _token_call(
    token_url: str, form: dict[str, str], old_refresh_token: str | None, transport: httpx.BaseTransport | None
) -> Tokens:
    grant = form["grant_type"]
    during = f"token {grant}"
    with httpx.Client(timeout=10.0, transport=transport, follow_redirects=False, trust_env=False) as http:
        answer = _request(http, "POST", token_url, during, None, None, None, form=form)
    _raise_for(answer, during, grant=grant)
    body = _json_object(answer, during)
    try:
        expires_in = int(body["expires_in"])
        access_token = body["access_token"]
        new_refresh_token = body.get("refresh_token")
        if not isinstance(access_token, str) or not isinstance(new_refresh_token, str | None):
            raise TypeError("token of a wrong type")
    except (KeyError, TypeError, ValueError) as exc:
        raise UpstreamError(f"{during}: malformed token answer", status=answer.status) from exc
    return Tokens(
        access_token=access_token,
        # Google sends a refresh token with the first consent only, and never with a refresh.
        refresh_token=new_refresh_token or old_refresh_token,
        expires_at=datetime.now(UTC) + timedelta(seconds=expires_in),
        scope=str(body.get("scope", "")),
    )
