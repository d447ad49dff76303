"""A fake Microsoft 365 for the sync tests: Graph's calendar endpoints with change notifications, and the
Microsoft identity platform's OAuth 2.0 authorization code flow, served over real HTTP from a thread on
127.0.0.1 (tests/sync/fake_http.py, shared with the Google fake). The API is at `{url}/v1.0`, the
authority at `{url}` (`{url}/{tenant}/oauth2/v2.0/authorize` and `/token`).

Each behaviour follows a Microsoft Learn page (learn.microsoft.com/…), named where it is implemented:
- /entra/identity-platform/v2-oauth2-auth-code-flow: authorize (consent page, redirect with code and state
  or error=access_denied), token (authorization_code with PKCE, single-use codes, refresh_token), the
  error body {"error", "error_description", "error_codes", …}.
- /graph/api/user-list-calendars: GET /me/calendars with @odata.nextLink paging.
- /graph/api/event-delta and /graph/delta-query-events: calendarView delta, its window, paging under
  Prefer: odata.maxpagesize, @odata.deltaLink on the last page only, removals as @removed.
- /graph/api/user-post-events: create; transactionId makes a retried create return the first event.
- /graph/api/event-update, /graph/api/event-delete: PATCH and DELETE /me/events/{id}.
- /graph/api/subscription-post-subscriptions (and subscription-update, subscription-delete),
  /graph/api/resources/subscription: create, renew and delete subscriptions; the maximum lifetime.
- /graph/change-notifications-delivery-webhooks: the validationToken handshake, the notification
  payload, clientState.
- /graph/change-notifications-lifecycle-events: reauthorizationRequired, subscriptionRemoved, missed.
- /graph/throttling and /graph/errors: 429 with Retry-After; {"error": {"code", "message", "innerError"}}.
Where a page is silent the fake picks one behaviour and marks it "Unspecified:". Not modelled: edited
occurrences (exceptions), monthly and yearly series, time zones other than IANA names and UTC,
`Prefer: outlook.timezone`, notification retries and batching, rich notifications.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import html
import json
import queue
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx

from tests.sync.fake_http import (
    Code,
    CodeRefused,
    FakeHTTPServer,
    FakeOAuth,
    FakeRequest,
    Fault,
    Grant,
    Refusal,
    Reply,
    TokenRefused,
    json_reply,
)

CLIENT_ID = "7c0e1d54-agentcal-test-client"
CLIENT_SECRET = "fake-client-secret-value"
TENANT_ID = "72f988bf-86f1-41af-91ab-2d7cd011db47"
DEFAULT_ACCOUNT = "alice@contoso.example"
# /graph/api/resources/subscription, "Subscription lifetime": Outlook event subscriptions without resource
# data, 10,080 minutes (under 7 days). Older versions of the page said 4,230.
MAX_SUBSCRIPTION_MINUTES = 10080
CODE_LIFETIME = timedelta(minutes=10)  # the auth code flow page: codes expire after about 10 minutes
DEFAULT_PAGE_SIZE = 10  # Unspecified: Graph's default page size for calendarView delta
MAX_SERIES_DAYS = 3 * 366  # how far the fake expands a series without an end
VALIDATION_TIMEOUT = 10.0  # delivery-webhooks: the endpoint must echo the token within 10 seconds
NOTIFICATION_TIMEOUT = 3.0  # delivery-webhooks: answer a notification within 3 seconds
PKCE_METHODS = {"S256", "plain"}
LOOPBACK = {"127.0.0.1", "localhost"}
TEXT_PLAIN = {"Content-Type": "text/plain; charset=utf-8"}
READ_SCOPES = {"calendars.read", "calendars.readwrite"}
WRITE_SCOPES = {"calendars.readwrite"}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_ERROR_CODES = {  # the code a fault answers with unless the test names one
    400: "BadRequest", 401: "InvalidAuthenticationToken", 403: "ErrorAccessDenied",
    404: "ErrorItemNotFound", 409: "ErrorIrresolvableConflict", 410: "SyncStateNotFound",
    429: "TooManyRequests", 500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable",
    504: "GatewayTimeout",
}  # fmt: skip
# Refusals answered in several places: (status, code, message).
NOT_FOUND = (404, "ErrorItemNotFound", "The specified object was not found in the store.")
ACCESS_DENIED = (403, "ErrorAccessDenied", "Access is denied. Check credentials and try again.")
SYNC_STATE_GONE = (410, "SyncStateNotFound", "The sync state generation is not found: synchronize again.")
NO_WINDOW = (
    400, "ErrorInvalidParameter",
    "This request requires a time window specified by the query string parameters StartDateTime and "
    "EndDateTime.",
)  # fmt: skip
NO_VALIDATION_200 = (
    400, "ValidationError",
    "Subscription validation request failed. Notification endpoint must respond with 200 OK to validation "
    "request.",
)  # fmt: skip
NO_VALIDATION_ECHO = (
    400, "ValidationError",
    "Subscription validation request failed. Response must exactly match validationToken query parameter.",
)  # fmt: skip
# The identity platform's refusals: name → (status, error, AADSTS number, description).
AADSTS = {
    "unknown_client": (400, "unauthorized_client", 700016, "Application was not found in the directory."),
    "no_secret": (401, "invalid_client", 7000218, "The request body must contain 'client_secret'."),
    "bad_secret": (401, "invalid_client", 7000215, "Invalid client secret provided."),
    "malformed": (400, "invalid_grant", 9002313, "Invalid request. Request is malformed or invalid."),
    "revoked": (400, "invalid_grant", 50173, "The provided grant has expired due to it being revoked."),
    "redeemed": (400, "invalid_grant", 54005, "OAuth2 Authorization code was already redeemed."),
    "code_expired": (400, "invalid_grant", 70008, "The provided authorization code has expired."),
    "redirect_mismatch": (
        400,
        "invalid_grant",
        70000,
        "redirect_uri differs from the authorization request's.",
    ),
    "verifier": (
        400,
        "invalid_grant",
        501481,
        "The Code_Verifier does not match the code_challenge supplied.",
    ),
    "grant_type": (400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type."),
}


def _graph_error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Refusal:
    """/graph/errors: {"error": {"code", "message", "innerError": {"date", "request-id", …}}}."""
    request_id = str(uuid.uuid4())
    inner = {
        "date": _now().strftime("%Y-%m-%dT%H:%M:%S"),
        "request-id": request_id,
        "client-request-id": request_id,
    }
    body = {"error": {"code": code, "message": message, "innerError": inner}}
    return Refusal(json_reply(status, body, {"request-id": request_id, **(headers or {})}))


def _oauth_error(name: str) -> Refusal:
    """v2-oauth2-auth-code-flow, "Error response": error, error_description (AADSTS number first), …"""
    status, error, number, description = AADSTS[name]
    trace = str(uuid.uuid4())
    body = {
        "error": error,
        "error_description": f"AADSTS{number}: {description} Trace ID: {trace}",
        "error_codes": [number],
        "timestamp": _now().strftime("%Y-%m-%d %H:%M:%SZ"),
        "trace_id": trace,
        "correlation_id": str(uuid.uuid4()),
    }
    return Refusal(json_reply(status, body, {"Cache-Control": "no-store"}))


@dataclass(frozen=True)
class Delivery:
    """One request the fake sent to a subscriber: a validation, a change notification or a lifecycle event."""

    kind: str  # "validation" | "notification" | "lifecycle"
    url: str
    payload: dict[str, Any] | None
    status: int | None  # None: no answer (refused, timed out)
    error: str | None = None


@dataclass
class FakeSubscription:
    id: str
    account: str
    resource: str
    calendar_id: str | None  # None: every calendar of the account (me/events)
    change_types: set[str]
    notification_url: str
    lifecycle_url: str | None
    client_state: str | None
    expiration: datetime
    reauthorization_required: bool = False


@dataclass
class _Calendar:
    id: str
    account: str
    name: str
    is_default: bool
    can_edit: bool
    events: dict[str, dict[str, Any]] = field(default_factory=dict)  # single instances and series masters
    excluded: dict[str, set[date]] = field(default_factory=dict)  # series master → deleted occurrences


@dataclass(frozen=True)
class _DeltaState:
    """What a skip or delta token stands for: the window, the instances the client knows after this round
    and the change counter they are as of; a skip token also holds the rest of the round's items."""

    account: str
    calendar_id: str
    start: datetime
    end: datetime
    known: frozenset[str]
    since: int
    pending: tuple[dict[str, Any], ...] = ()


def _json_of(request: FakeRequest) -> dict[str, Any]:
    try:
        parsed = json.loads(request.body or b"{}")
    except ValueError:
        raise _graph_error(400, "BadRequest", "Unable to read JSON request payload.") from None
    if not isinstance(parsed, dict):
        raise _graph_error(400, "BadRequest", "Unable to read JSON request payload.")
    return parsed


class GraphFake(FakeHTTPServer):
    def __init__(
        self,
        *,
        client_id: str = CLIENT_ID,
        client_secret: str = CLIENT_SECRET,
        redirect_uris: set[str] | None = None,  # None: any redirect URI is registered
        access_token_ttl: float = 3600.0,
        default_account: str = DEFAULT_ACCOUNT,
    ) -> None:
        super().__init__()
        self.client_id, self.client_secret, self.redirect_uris = client_id, client_secret, redirect_uris
        self.default_account = default_account
        # v2-oauth2-auth-code-flow: a code is redeemed at most once (Unspecified: whether a refused
        # redemption burns it; here any attempt does); revoking a grant leaves its access tokens to expire.
        self._oauth = FakeOAuth(
            access_token_ttl=access_token_ttl, access_prefix="EwB", refresh_prefix="M.C",
            burn_refused_codes=True, revoking_ends_access_tokens=False,
        )  # fmt: skip
        self._calendars: dict[str, _Calendar] = {}
        self._changed_at: dict[str, int] = {}  # stored event id → change counter of its last change
        self._seq = 0
        self._skip_tokens: dict[str, _DeltaState] = {}
        self._delta_tokens: dict[str, _DeltaState] = {}
        self._subscriptions: dict[str, FakeSubscription] = {}
        self.deliveries: list[Delivery] = []
        self._delivered = threading.Condition(self._lock)
        self._outbox: queue.Queue[tuple[str, str, dict[str, Any]] | None] = queue.Queue()
        self._http = httpx.Client(trust_env=False)
        self.api_url = f"{self.url}/v1.0"
        self._courier = threading.Thread(target=self._deliver_forever, daemon=True)
        self._courier.start()

    def close(self) -> None:
        super().close()
        self._outbox.put(None)
        self._courier.join(timeout=NOTIFICATION_TIMEOUT + 1)
        self._http.close()

    # Control: the identity platform

    def issue_tokens(
        self, account: str | None = None, scope: str = "offline_access Calendars.ReadWrite"
    ) -> dict[str, Any]:
        """A token response as if `account` had consented, without the consent page."""
        with self._lock:
            return self._issue(Grant(account or self.default_account, self.client_id, scope.split()))

    def revoke(self, refresh_token: str) -> None:
        """The person withdraws consent (or their password changes): every refresh token of that grant is
        refused with invalid_grant from now on. Access tokens already issued live on until they expire."""
        with self._lock:
            self._oauth.revoke(refresh_token)

    def expire_access_tokens(self) -> None:
        with self._lock:
            self._oauth.expire_access_tokens()

    # Control: calendars and the person editing them in Outlook

    def add_calendar(
        self, account: str, calendar_id: str, name: str, is_default: bool = False, *, can_edit: bool = True
    ) -> None:
        with self._lock:
            self._calendars[calendar_id] = _Calendar(calendar_id, account, name, is_default, can_edit)

    def human_put(self, calendar_id: str, event: dict[str, Any]) -> dict[str, Any]:
        """Creates (new or absent id) or updates (known id, merged like PATCH) an event as the person would in
        Outlook. `recurrence` with a daily or weekly pattern makes a series master, expanded into occurrences
        by calendarView."""
        with self._lock:
            calendar = self._calendars[calendar_id]
            event_id = event.get("id") or _new_id()
            existing = calendar.events.get(event_id)
            stored = self._store(calendar, event_id, {**(existing or {}), **event}, created=existing is None)
            self._notify(calendar, event_id, "updated" if existing else "created")
            return copy.deepcopy(stored)

    def human_delete(self, calendar_id: str, event_id: str) -> None:
        """Deletes an event, a whole series (its master's id) or one occurrence of a series."""
        with self._lock:
            self._delete(self._calendars[calendar_id], event_id)

    def events(self, calendar_id: str) -> list[dict[str, Any]]:
        """The stored events (single instances and series masters), not expanded."""
        with self._lock:
            return copy.deepcopy(list(self._calendars[calendar_id].events.values()))

    def expire_delta_tokens(self) -> None:
        """Every outstanding next and delta link now fails as an evicted one does: 410 Gone with
        SyncStateNotFound. delta-query-overview: Outlook delta tokens live as long as the service's token
        cache keeps them; the 410/SyncStateNotFound answer is what Outlook sends for an evicted one (the
        page documents 400 syncStateNotFound for directory resources)."""
        with self._lock:
            self._skip_tokens.clear()
            self._delta_tokens.clear()

    # Control: subscriptions

    def subscription(self, subscription_id: str) -> FakeSubscription | None:
        with self._lock:
            found = self._subscriptions.get(subscription_id)
            return copy.deepcopy(found) if found else None

    def lifecycle(self, subscription_id: str, event: str) -> None:
        """Sends a lifecycle notification (change-notifications-lifecycle-events) to the subscription's
        lifecycleNotificationUrl: reauthorizationRequired (renew or reauthorize to clear it),
        subscriptionRemoved (the subscription is gone: create a new one) or missed (notifications were lost:
        resync with delta)."""
        if event not in {"reauthorizationRequired", "subscriptionRemoved", "missed"}:
            raise ValueError(f"not a lifecycle event: {event}")
        with self._lock:
            subscription = self._subscriptions[subscription_id]
            if subscription.lifecycle_url is None:
                raise ValueError(
                    "the subscription has no lifecycleNotificationUrl: Graph would not send this"
                )
            payload = {
                "subscriptionId": subscription.id,
                "subscriptionExpirationDateTime": _graph_time(subscription.expiration),
                "tenantId": TENANT_ID,
                "clientState": subscription.client_state,
                "lifecycleEvent": event,
            }
            self._outbox.put(("lifecycle", subscription.lifecycle_url, {"value": [payload]}))
            if event == "subscriptionRemoved":
                del self._subscriptions[subscription_id]
            elif event == "reauthorizationRequired":
                subscription.reauthorization_required = True

    def wait_for_deliveries(
        self, count: int, *, kind: str | None = None, timeout: float = 5.0
    ) -> list[Delivery]:
        """The deliveries (of `kind`) once there are at least `count`; AssertionError after `timeout`."""
        with self._delivered:

            def matching() -> list[Delivery]:
                return [d for d in self.deliveries if kind is None or d.kind == kind]

            if not self._delivered.wait_for(lambda: len(matching()) >= count, timeout):
                raise AssertionError(
                    f"{len(matching())} {kind or ''} deliveries after {timeout} s, expected {count}"
                )
            return matching()

    # Control: faults

    def fail_next(
        self,
        status: int,
        *,
        times: int = 1,
        code: str | None = None,
        retry_after: float | str | None = None,
        path_contains: str | None = None,
    ) -> None:
        """The next `times` requests to the Graph API, or with `path_contains` to any path containing it (the
        OAuth endpoints included), are answered with `status` and a Graph error body instead of served."""
        self.add_fault(
            status, times=times, reason=code or _ERROR_CODES.get(status, "UnknownError"),
            retry_after=retry_after, path_contains=path_contains,
        )  # fmt: skip

    # HTTP

    def route(self, request: FakeRequest) -> Reply:
        routes: list[tuple[str, str, str | None, Callable[..., Reply]]] = [
            ("GET", r"/(?P<tenant>[^/]+)/oauth2/v2\.0/authorize", None, self._authorize_page),
            ("POST", r"/(?P<tenant>[^/]+)/oauth2/v2\.0/authorize", None, self._authorize_decision),
            ("POST", r"/(?P<tenant>[^/]+)/oauth2/v2\.0/token", None, self._token),
            ("GET", r"/v1\.0/me/calendars", "read", self._list_calendars),
            ("GET", r"/v1\.0/me/calendars/(?P<calendar_id>[^/]+)/calendarView/delta", "read", self._delta),
            ("POST", r"/v1\.0/me/calendars/(?P<calendar_id>[^/]+)/events", "write", self._create_event),
            ("PATCH", r"/v1\.0/me/events/(?P<event_id>[^/]+)", "write", self._update_event),
            ("DELETE", r"/v1\.0/me/events/(?P<event_id>[^/]+)", "write", self._delete_event),
            ("POST", r"/v1\.0/subscriptions", "read", self._create_subscription),
            ("PATCH", r"/v1\.0/subscriptions/(?P<subscription_id>[^/]+)", "read", self._renew_subscription),
            ("DELETE", r"/v1\.0/subscriptions/(?P<subscription_id>[^/]+)", "read", self._delete_subscription),
        ]
        for method, pattern, access, handler in routes:
            match = re.fullmatch(pattern, request.path, re.IGNORECASE)  # Graph's segments ignore case
            if match and method == request.method:
                arguments = {name: unquote(value) for name, value in match.groupdict().items()}
                if handler == self._create_subscription:  # validates the URLs outside the lock
                    return handler(request, self._authenticate(request, access), **arguments)
                with self._lock:
                    if access is None:
                        return handler(request, **arguments)
                    return handler(request, self._authenticate(request, access), **arguments)
        segment = request.path.rstrip("/").rsplit("/", 1)[-1]
        raise _graph_error(400, "BadRequest", f"Resource not found for the segment '{segment}'.")

    def fault_applies(self, fault: Fault, request: FakeRequest) -> bool:
        """Any Graph API request, or one to any path (the OAuth endpoints included) containing
        `path_contains`."""
        if fault.path_contains is None:
            return request.path.startswith("/v1.0/")
        return fault.path_contains in request.path

    def refusal_for(self, fault: Fault, request: FakeRequest) -> Refusal:
        message = "Please retry again later." if fault.status == 429 else "Injected by the test."
        headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
        return _graph_error(fault.status, fault.reason or "UnknownError", message, headers)

    def crash(self, request: FakeRequest, exc: Exception) -> Reply:
        """A bug in the fake: said in the answer rather than by dropping the connection."""
        return _graph_error(500, "InternalServerError", f"fake: {type(exc).__name__}: {exc}").reply

    def _authenticate(self, request: FakeRequest, access: str | None) -> str:
        """The account a bearer token stands for. 401 InvalidAuthenticationToken for a missing, unknown or
        expired token; 403 ErrorAccessDenied when its scopes do not cover the request."""
        scheme, _, token = (request.headers.get("Authorization") or "").partition(" ")
        challenge = {"WWW-Authenticate": 'Bearer realm="", error="invalid_token"'}
        if scheme.lower() != "bearer" or not token:
            raise _graph_error(401, "InvalidAuthenticationToken", "Access token is empty.", challenge)
        try:
            with self._lock:
                issued = self._oauth.bearer(f"Bearer {token}")
        except TokenRefused as refused:
            message = (
                "Lifetime validation failed."
                if refused.why == "expired"
                else "Access token validation failure."
            )
            raise _graph_error(401, "InvalidAuthenticationToken", message, challenge) from None
        account, scopes = issued.account, issued.scopes
        if not scopes & (WRITE_SCOPES if access == "write" else READ_SCOPES):
            raise _graph_error(*ACCESS_DENIED)
        return account

    # The identity platform (v2-oauth2-auth-code-flow)

    def _authorize_page(self, request: FakeRequest, tenant: str) -> Reply:
        params = self._authorize_params(request.query)
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(key)}" value="{html.escape(value)}">'
            for key, value in params.items()
        )
        login = html.escape(params.get("login_hint") or self.default_account)
        scopes = html.escape(params["scope"])
        page = (
            "<!doctype html><html><head><title>Permissions requested</title></head><body>"
            f"<h1>Permissions requested</h1><p>AgentCal wants: {scopes}</p>"
            f'<form method="post" action="/{quote(tenant)}/oauth2/v2.0/authorize">{hidden}'
            f'<label>Account <input name="login" id="login" value="{login}"></label>'
            '<button id="allow" name="consent" value="allow">Accept</button>'
            '<button id="deny" name="consent" value="deny">Cancel</button></form></body></html>'
        )
        return 200, {"Content-Type": "text/html; charset=utf-8"}, page.encode()

    def _authorize_decision(self, request: FakeRequest, tenant: str) -> Reply:
        form = request.form()
        params = self._authorize_params(form)
        answer = {"state": params["state"]} if "state" in params else {}
        if form.get("consent") != "allow":
            answer |= {
                "error": "access_denied",
                "error_description": "AADSTS65004: User declined to consent to access the app.",
            }
        else:
            grant = Grant(form.get("login") or self.default_account, self.client_id, params["scope"].split())
            challenge = params.get("code_challenge")
            method = params.get("code_challenge_method", "plain")
            expires_at = time.time() + CODE_LIFETIME.total_seconds()
            code = self._oauth.new_code(Code(grant, params["redirect_uri"], challenge, method, expires_at))
            answer |= {"code": code, "session_state": str(uuid.uuid4())}
        return _redirect(params["redirect_uri"], answer)

    def _authorize_params(self, params: dict[str, str]) -> dict[str, str]:
        """Problems with the client or the redirect URI show an error page; the rest go back to the redirect
        URI as error=… (v2-oauth2-auth-code-flow, "Error response")."""
        if params.get("client_id") != self.client_id:
            raise Refusal(_page(400, "AADSTS700016: Application was not found in the directory."))
        redirect_uri = params.get("redirect_uri", "")
        if not redirect_uri or (self.redirect_uris is not None and redirect_uri not in self.redirect_uris):
            raise Refusal(_page(400, "AADSTS50011: The redirect URI does not match the registered ones."))
        problem = None
        if params.get("response_type") != "code":
            problem = ("unsupported_response_type", "AADSTS700054: response_type 'code' is expected.")
        elif not params.get("scope"):
            problem = ("invalid_request", "AADSTS900144: The request must contain the 'scope' parameter.")
        elif (
            params.get("code_challenge") and params.get("code_challenge_method", "plain") not in PKCE_METHODS
        ):
            problem = ("invalid_request", "AADSTS501491: Invalid code_challenge_method.")
        if problem:
            state = {"state": params["state"]} if "state" in params else {}
            error = {"error": problem[0], "error_description": problem[1], **state}
            raise Refusal(_redirect(redirect_uri, error))
        return params

    def _token(self, request: FakeRequest, tenant: str) -> Reply:
        form = request.form()
        client_id, client_secret = form.get("client_id", ""), form.get("client_secret")
        basic = request.headers.get("Authorization") or ""
        if basic.lower().startswith("basic "):
            client_id, _, client_secret = base64.b64decode(basic[6:]).decode().partition(":")
        if client_id != self.client_id:
            raise _oauth_error("unknown_client")
        if not client_secret:
            raise _oauth_error("no_secret")
        if not secrets.compare_digest(client_secret, self.client_secret):
            raise _oauth_error("bad_secret")
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            return json_reply(200, self._redeem(form), {"Cache-Control": "no-store"})
        if grant_type == "refresh_token":
            refresh_token = form.get("refresh_token", "")
            grant = self._oauth.grant_for(refresh_token)
            if grant is None:
                raise _oauth_error(
                    "revoked" if self._oauth.knows_refresh_token(refresh_token) else "malformed"
                )
            # Refresh tokens are replaced on every use; the old one stays valid until its grant goes.
            return json_reply(200, self._issue(grant), {"Cache-Control": "no-store"})
        raise _oauth_error("grant_type")

    def _redeem(self, form: dict[str, str]) -> dict[str, Any]:
        try:
            code = self._oauth.redeem(
                form.get("code", ""), client_id=self.client_id, redirect_uri=form.get("redirect_uri"),
                verifier=form.get("code_verifier", ""),
            )  # fmt: skip
        except CodeRefused as refused:
            raise _oauth_error(
                {"unknown": "malformed", "used": "redeemed", "expired": "code_expired"}.get(
                    refused.why, "verifier" if refused.why.startswith("verifier") else refused.why
                )
            ) from None
        return self._issue(code.grant)

    def _issue(self, grant: Grant) -> dict[str, Any]:
        """A token response: refresh_token only when offline_access was granted; scope without the OpenID
        Connect and offline_access scopes, as the identity platform answers."""
        granted = [
            s for s in grant.scopes if s.lower() not in {"offline_access", "openid", "profile", "email"}
        ]
        ttl = int(self._oauth.access_token_ttl)
        answer: dict[str, Any] = {
            "token_type": "Bearer",
            "scope": " ".join(granted),
            "expires_in": ttl,
            "ext_expires_in": ttl,
            "access_token": self._oauth.new_access_token(grant, {s.lower() for s in granted}),
        }
        if "offline_access" in {s.lower() for s in grant.scopes}:
            answer["refresh_token"] = self._oauth.new_refresh_token(grant)
        return answer

    # Calendars and events

    def _list_calendars(self, request: FakeRequest, account: str) -> Reply:
        """user-list-calendars: pages of $top (default 10) with @odata.nextLink."""
        owned = [c for c in self._calendars.values() if c.account == account]
        top, skip = int(request.query.get("$top") or 10), int(request.query.get("$skip") or 0)
        value = [
            {
                "id": c.id, "name": c.name, "color": "auto", "isDefaultCalendar": c.is_default,
                "canEdit": c.can_edit, "canShare": c.can_edit, "canViewPrivateItems": True,
                "changeKey": hashlib.sha256(c.id.encode()).hexdigest()[:16],
                "owner": {"name": account.split("@")[0].title(), "address": account},
            }
            for c in owned[skip : skip + top]
        ]  # fmt: skip
        body: dict[str, Any] = {
            "@odata.context": f"{self.api_url}/$metadata#users('{account}')/calendars",
            "value": value,
        }
        if skip + top < len(owned):
            body["@odata.nextLink"] = (
                f"{self.api_url}/me/calendars?{urlencode({'$top': top, '$skip': skip + top})}"
            )
        return json_reply(200, body)

    def _delta(self, request: FakeRequest, account: str, calendar_id: str) -> Reply:
        """event-delta, delta-query-events: the first request names the window (400 without it) and lists
        every instance in it; later rounds (the deltaLink) list the instances changed since, and as
        {"@removed": {"reason": "deleted"}} those no longer in the window (Unspecified: the reason given for
        one moved out of the window; "deleted" here too). Each round is paged with @odata.nextLink; the
        deltaLink comes on its last page only. Links stay valid until expire_delta_tokens: following one
        again answers the same changes (a retried page is safe)."""
        page_size, applied = DEFAULT_PAGE_SIZE, dict[str, str]()
        if found := re.search(r"odata\.maxpagesize=(\d+)", request.headers.get("Prefer") or ""):
            page_size = max(1, int(found.group(1)))
            applied = {"Preference-Applied": f"odata.maxpagesize={page_size}"}
        # "the server may return fewer" than odata.maxpagesize (delta-query-overview): tests cap it.
        page_size = min(page_size, self.page_size or page_size)
        if "$skiptoken" in request.query:
            state = self._skip_tokens.get(request.query["$skiptoken"])
            if state is None or state.account != account:
                raise _graph_error(*SYNC_STATE_GONE)
            return json_reply(200, self._delta_page(state, list(state.pending), page_size), applied)
        calendar = self._calendar(account, calendar_id)
        if "$deltatoken" in request.query:
            state = self._delta_tokens.get(request.query["$deltatoken"])
            if state is None or state.account != account or state.calendar_id != calendar.id:
                raise _graph_error(*SYNC_STATE_GONE)
            start, end, known, since = state.start, state.end, state.known, state.since
        else:
            try:
                start = _parse_instant(request.query["startDateTime"])
                end = _parse_instant(request.query["endDateTime"])
            except (KeyError, ValueError):
                raise _graph_error(*NO_WINDOW) from None
            known, since = frozenset(), 0
        view = dict(self._instances(calendar, start, end))
        items = [instance for instance, changed_at in view.values() if changed_at > since]
        items += [{"@odata.type": "#microsoft.graph.event", "id": gone, "@removed": {"reason": "deleted"}}
                  for gone in sorted(known - view.keys())]  # fmt: skip
        state = _DeltaState(account, calendar.id, start, end, frozenset(view), self._seq)
        return json_reply(200, self._delta_page(state, items, page_size), applied)

    def _delta_page(self, state: _DeltaState, items: list[dict[str, Any]], page_size: int) -> dict[str, Any]:
        page, rest = items[:page_size], items[page_size:]
        token = secrets.token_urlsafe(24)
        base = f"{self.api_url}/me/calendars/{quote(state.calendar_id, safe='')}/calendarView/delta"
        body: dict[str, Any] = {
            "@odata.context": f"{self.api_url}/$metadata#Collection(event)",
            "value": page,
        }
        if rest:
            self._skip_tokens[token] = replace(state, pending=tuple(rest))
            body["@odata.nextLink"] = f"{base}?$skiptoken={token}"
        else:
            self._delta_tokens[token] = replace(state, pending=())
            body["@odata.deltaLink"] = f"{base}?$deltatoken={token}"
        return body

    def _create_event(self, request: FakeRequest, account: str, calendar_id: str) -> Reply:
        """user-post-events: 201 with the event. A transactionId already used in this calendar returns the
        event made with it (Unspecified: with 201, as for a new one) instead of a second event."""
        calendar = self._calendar(account, calendar_id, write=True)
        event = _json_of(request)
        transaction_id = event.get("transactionId")
        for existing in calendar.events.values():
            if transaction_id and existing.get("transactionId") == transaction_id:
                return json_reply(201, existing)
        event_id = _new_id()
        stored = self._store(calendar, event_id, {k: v for k, v in event.items() if k != "id"}, created=True)
        self._notify(calendar, event_id, "created")
        return json_reply(201, stored)

    def _update_event(self, request: FakeRequest, account: str, event_id: str) -> Reply:
        """event-update: PATCH merges top-level properties; transactionId cannot change once set."""
        calendar = self._calendar_of(account, event_id, write=True)
        existing, changes = calendar.events[event_id], _json_of(request)
        if "transactionId" in changes and changes["transactionId"] != existing.get("transactionId"):
            raise _graph_error(400, "ErrorInvalidRequest", "The transactionId of an event cannot be changed.")
        stored = self._store(calendar, event_id, {**existing, **changes, "id": event_id}, created=False)
        self._notify(calendar, event_id, "updated")
        return json_reply(200, stored)

    def _delete_event(self, request: FakeRequest, account: str, event_id: str) -> Reply:
        """event-delete: 204; 404 ErrorItemNotFound when the event is not (or no longer) there."""
        self._delete(self._calendar_of(account, event_id, write=True), event_id)
        return 204, {}, b""

    def _calendar(self, account: str, calendar_id: str, *, write: bool = False) -> _Calendar:
        calendar = self._calendars.get(calendar_id)
        if calendar is None or calendar.account != account:
            raise _graph_error(*NOT_FOUND)
        if write and not calendar.can_edit:
            raise _graph_error(*ACCESS_DENIED)
        return calendar

    def _calendar_of(self, account: str, event_id: str, *, write: bool) -> _Calendar:
        for calendar in self._calendars.values():
            if calendar.account == account and (
                event_id in calendar.events or self._occurrence(calendar, event_id)
            ):
                return self._calendar(account, calendar.id, write=write)
        raise _graph_error(*NOT_FOUND)

    def _store(
        self, calendar: _Calendar, event_id: str, event: dict[str, Any], *, created: bool
    ) -> dict[str, Any]:
        """Saves the event in Graph's shape: times as "…T09:00:00.0000000" in their zone, a fresh changeKey
        and lastModifiedDateTime, and the change counter delta rounds compare with."""
        event = copy.deepcopy(event)
        for side in ("start", "end"):
            moment = _parse_zoned(event.get(side))  # 400 when absent or malformed
            event[side] = {
                "dateTime": moment.strftime("%Y-%m-%dT%H:%M:%S.0000000"),
                "timeZone": event[side]["timeZone"],
            }
        if _parse_zoned(event["end"]) < _parse_zoned(event["start"]):
            raise _graph_error(400, "ErrorInvalidRequest", "The end of the event is before its start.")
        if event.get("isAllDay") and any(
            _parse_zoned(event[side]).time() != datetime.min.time() for side in ("start", "end")
        ):
            # Unspecified: the code. The event resource page requires midnight for all-day events.
            raise _graph_error(400, "ErrorInvalidRequest", "An all-day event must start and end at midnight.")
        recurrence = event.get("recurrence")
        if recurrence and (recurrence.get("pattern") or {}).get("type") not in {"daily", "weekly"}:
            raise _graph_error(400, "ErrorInvalidRequest", "The fake expands only daily and weekly series.")
        now = _graph_time(_now())
        change_key = base64.b64encode(secrets.token_bytes(12)).decode()
        defaults: dict[str, Any] = {
            "subject": "", "isAllDay": False, "isCancelled": False, "showAs": "busy",
            "responseStatus": {"response": "organizer", "time": "0001-01-01T00:00:00Z"},
            "seriesMasterId": None, "createdDateTime": now,
        }  # fmt: skip
        event = {**defaults, **event} if created else event
        event |= {
            "id": event_id, "type": "seriesMaster" if recurrence else "singleInstance",
            "lastModifiedDateTime": now, "changeKey": change_key, "@odata.etag": f'W/"{change_key}"',
        }  # fmt: skip
        calendar.events[event_id] = event
        self._seq += 1
        self._changed_at[event_id] = self._seq
        return copy.deepcopy(event)

    def _delete(self, calendar: _Calendar, event_id: str) -> None:
        if event_id in calendar.events:
            del calendar.events[event_id]
            calendar.excluded.pop(event_id, None)
            self._seq += 1
            self._notify(calendar, event_id, "deleted")
            return
        occurrence = self._occurrence(calendar, event_id)
        if occurrence is None:
            raise _graph_error(*NOT_FOUND)
        master_id, day = occurrence
        calendar.excluded.setdefault(master_id, set()).add(day)
        self._seq += 1
        self._changed_at[master_id] = self._seq
        self._notify(calendar, master_id, "updated")

    def _occurrence(self, calendar: _Calendar, event_id: str) -> tuple[str, date] | None:
        """(series master id, day) of an occurrence id, found by expanding the series (ids are derived)."""
        for master_id, master in calendar.events.items():
            if master.get("recurrence") and event_id.startswith("AAMkOcc"):
                for day in _series_days(master, None):
                    if _occurrence_id(master_id, day) == event_id:
                        return master_id, day
        return None

    def _instances(
        self, calendar: _Calendar, start: datetime, end: datetime
    ) -> Iterator[tuple[str, tuple[dict[str, Any], int]]]:
        """The instances overlapping [start, end) as calendarView shows them (start and end in UTC), with the
        change counter of their last change: single events and occurrences, never series masters."""
        for event_id, event in calendar.events.items():
            changed_at = self._changed_at[event_id]
            first_start, first_end = _parse_zoned(event["start"]), _parse_zoned(event["end"])
            if not event.get("recurrence"):
                if first_start < end and first_end > start:
                    yield event_id, (_in_utc(event, first_start, first_end), changed_at)
                continue
            excluded = calendar.excluded.get(event_id, set())
            for day in _series_days(event, end.date() + timedelta(days=1)):
                occurrence_start = datetime.combine(day, first_start.time(), first_start.tzinfo)
                occurrence_end = occurrence_start + (first_end - first_start)
                if day in excluded or not (occurrence_start < end and occurrence_end > start):
                    continue
                occurrence_id = _occurrence_id(event_id, day)
                instance = {k: v for k, v in event.items() if k != "recurrence"}
                instance |= {"id": occurrence_id, "type": "occurrence", "seriesMasterId": event_id}
                yield occurrence_id, (_in_utc(instance, occurrence_start, occurrence_end), changed_at)

    # Subscriptions and change notifications

    def _create_subscription(self, request: FakeRequest, account: str) -> Reply:
        """subscription-post-subscriptions: checks the request, then (without holding the fake) the
        validationToken handshake with notificationUrl and lifecycleNotificationUrl; 201 with the
        subscription, or 400 ValidationError when an endpoint does not echo the token."""
        body = _json_of(request)
        required = ("changeType", "notificationUrl", "resource", "expirationDateTime")
        missing = [key for key in required if not body.get(key)]
        if missing:
            raise _graph_error(400, "InvalidRequest", f"Missing required properties: {', '.join(missing)}.")
        change_types = set(str(body["changeType"]).split(","))
        if not change_types <= {"created", "updated", "deleted"}:
            raise _graph_error(400, "InvalidRequest", "changeType must be created, updated and/or deleted.")
        client_state = body.get("clientState")
        if client_state is not None and len(client_state) > 128:
            raise _graph_error(400, "InvalidRequest", "clientState is longer than 128 characters.")
        urls = [url for url in (body["notificationUrl"], body.get("lifecycleNotificationUrl")) if url]
        for url in urls:
            parts = urlsplit(url)
            # Graph requires https; the fake also takes http to 127.0.0.1 and localhost (test receivers).
            if parts.scheme != "https" and not (parts.scheme == "http" and parts.hostname in LOOPBACK):
                raise _graph_error(400, "InvalidRequest", "The notification URL must use https.")
        with self._lock:
            calendar_id = self._subscribed_calendar(account, str(body["resource"]))
            expiration = self._expiration(body["expirationDateTime"])
        for url in urls:
            self._validate(url)
        subscription = FakeSubscription(
            str(uuid.uuid4()), account, str(body["resource"]), calendar_id, change_types,
            body["notificationUrl"], body.get("lifecycleNotificationUrl"), client_state, expiration,
        )  # fmt: skip
        with self._lock:
            self._subscriptions[subscription.id] = subscription
        return json_reply(201, self._subscription_json(subscription))

    def _renew_subscription(self, request: FakeRequest, account: str, subscription_id: str) -> Reply:
        """subscription-update: a new expirationDateTime (within the maximum). Renewing also answers a
        reauthorizationRequired (change-notifications-lifecycle-events)."""
        subscription = self._own_subscription(account, subscription_id)
        subscription.expiration = self._expiration(_json_of(request).get("expirationDateTime"))
        subscription.reauthorization_required = False
        return json_reply(200, self._subscription_json(subscription))

    def _delete_subscription(self, request: FakeRequest, account: str, subscription_id: str) -> Reply:
        del self._subscriptions[self._own_subscription(account, subscription_id).id]
        return 204, {}, b""

    def _own_subscription(self, account: str, subscription_id: str) -> FakeSubscription:
        subscription = self._subscriptions.get(subscription_id)
        if subscription is None or subscription.account != account or subscription.expiration <= _now():
            # Unspecified: the code for an unknown or expired subscription.
            raise _graph_error(404, "ResourceNotFound", "The object was not found.")
        return subscription

    def _subscribed_calendar(self, account: str, resource: str) -> str | None:
        """me/events (every calendar), me/calendar/events (the default one) or me/calendars/{id}/events."""
        path = resource.strip("/")
        if path.lower() == "me/events":
            return None
        if path.lower() == "me/calendar/events":
            default = [c for c in self._calendars.values() if c.account == account and c.is_default]
            if default:
                return default[0].id
        elif match := re.fullmatch(r"me/calendars/([^/]+)/events", path, re.IGNORECASE):
            calendar = self._calendars.get(unquote(match.group(1)).strip("'\""))
            if calendar is not None and calendar.account == account:
                return calendar.id
        raise _graph_error(400, "InvalidRequest", f"Unsupported or unknown resource '{resource}'.")

    def _expiration(self, value: Any) -> datetime:
        try:
            expiration = _parse_instant(str(value))
        except ValueError:
            raise _graph_error(400, "InvalidRequest", "expirationDateTime is not a date and time.") from None
        now = _now()
        if expiration <= now:
            raise _graph_error(400, "InvalidRequest", "Subscription expiration must be in the future.")
        if expiration > now + timedelta(minutes=MAX_SUBSCRIPTION_MINUTES):
            limit = f"Subscription expiration can only be {MAX_SUBSCRIPTION_MINUTES} minutes in the future."
            raise _graph_error(400, "InvalidRequest", limit)
        return expiration

    def _validate(self, url: str) -> None:
        """change-notifications-delivery-webhooks, "Notification endpoint validation": POST
        {url}?validationToken=… (text/plain); the endpoint must answer 200, text/plain, with the token
        (decoded) as the body, within 10 seconds."""
        token = f"Validation: Testing client application reachability Request-Id: {uuid.uuid4()}"
        target = f"{url}{'&' if '?' in url else '?'}{urlencode({'validationToken': token})}"
        try:
            response = self._http.post(target, headers=TEXT_PLAIN, timeout=VALIDATION_TIMEOUT)
        except httpx.HTTPError as exc:
            self._record(Delivery("validation", url, None, None, f"{type(exc).__name__}: {exc}"))
            raise _graph_error(*NO_VALIDATION_200) from None
        self._record(Delivery("validation", url, None, response.status_code))
        if response.status_code != 200:
            raise _graph_error(*NO_VALIDATION_200)
        if response.text != token or not response.headers.get("Content-Type", "").startswith("text/plain"):
            raise _graph_error(*NO_VALIDATION_ECHO)

    def _subscription_json(self, subscription: FakeSubscription) -> dict[str, Any]:
        return {
            "@odata.context": f"{self.api_url}/$metadata#subscriptions/$entity",
            "id": subscription.id,
            "resource": subscription.resource,
            "applicationId": self.client_id,
            "changeType": ",".join(sorted(subscription.change_types)),
            "clientState": subscription.client_state,
            "notificationUrl": subscription.notification_url,
            "lifecycleNotificationUrl": subscription.lifecycle_url,
            "expirationDateTime": _graph_time(subscription.expiration),
            "creatorId": str(uuid.uuid5(uuid.NAMESPACE_URL, subscription.account)),
            "includeResourceData": False,
            "latestSupportedTlsVersion": "v1_2",
        }

    def _notify(self, calendar: _Calendar, event_id: str, change_type: str) -> None:
        """change-notifications-delivery-webhooks: a change notification (no resource data) to every live
        subscription covering the calendar and the change type, for any change, ours included. Occurrences
        notify as their series master."""
        user_id = uuid.uuid5(uuid.NAMESPACE_URL, calendar.account)
        resource = f"Users/{user_id}/Events/{event_id}"
        etag = (calendar.events.get(event_id) or {}).get("@odata.etag")
        for subscription in self._subscriptions.values():
            if (
                subscription.account == calendar.account
                and subscription.calendar_id in (None, calendar.id)
                and change_type in subscription.change_types
                and subscription.expiration > _now()
            ):
                notification = {
                    "subscriptionId": subscription.id,
                    "subscriptionExpirationDateTime": _graph_time(subscription.expiration),
                    "changeType": change_type,
                    "resource": resource,
                    "resourceData": {
                        "@odata.type": "#Microsoft.Graph.Event",
                        "@odata.id": resource,
                        "@odata.etag": etag,
                        "id": event_id,
                    },  # fmt: skip
                    "clientState": subscription.client_state,
                    "tenantId": TENANT_ID,
                }
                self._outbox.put(("notification", subscription.notification_url, {"value": [notification]}))

    def _deliver_forever(self) -> None:
        """Sends notifications in order, one at a time, recording each answer. Not modelled: Graph's
        retries of failed deliveries (with back-off, for up to 4 hours)."""
        while (job := self._outbox.get()) is not None:
            kind, url, payload = job
            try:
                response = self._http.post(url, json=payload, timeout=NOTIFICATION_TIMEOUT)
                self._record(Delivery(kind, url, payload, response.status_code))
            except httpx.HTTPError as exc:
                self._record(Delivery(kind, url, payload, None, f"{type(exc).__name__}: {exc}"))

    def _record(self, delivery: Delivery) -> None:
        with self._delivered:
            self.deliveries.append(delivery)
            self._delivered.notify_all()


class NotificationReceiver(FakeHTTPServer):
    """A subscriber's endpoint for the tests: echoes validation tokens as Graph requires (unless told not
    to) and records every notification's JSON. `url` is its address; paths are free."""

    def __init__(self, *, echo: bool = True, status: int = 202) -> None:
        self.echo, self.status = echo, status
        self.received: list[tuple[str, dict[str, Any]]] = []  # (path, payload)
        self.validations: list[str] = []  # the decoded tokens seen
        super().__init__()

    def route(self, request: FakeRequest) -> Reply:
        text = {"Content-Type": "text/plain; charset=utf-8"}
        token = request.query.get("validationToken")
        with self._lock:
            if token:
                self.validations.append(token)
                return (200, text, token.encode()) if self.echo else (404, text, b"")
            self.received.append((request.path, json.loads(request.body)))
        return self.status, text, b""

    def crash(self, request: FakeRequest, exc: Exception) -> Reply:
        return 500, {"Content-Type": "text/plain; charset=utf-8"}, f"{type(exc).__name__}: {exc}".encode()


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    """Graph ids are long base64 strings; this one ends in "=" so clients must quote it in paths."""
    return "AAMkAG" + secrets.token_hex(20) + "AAA="


def _occurrence_id(master_id: str, day: date) -> str:
    return "AAMkOcc" + hashlib.sha256(f"{master_id}/{day.isoformat()}".encode()).hexdigest()[:40] + "="


def _graph_time(moment: datetime) -> str:
    """Graph's timestamps: UTC with seven fraction digits."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"


def _parse_instant(value: str) -> datetime:
    """An ISO 8601 instant; without an offset it is UTC."""
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _parse_zoned(value: Any) -> datetime:
    """A dateTimeTimeZone ({"dateTime", "timeZone"}) as an aware datetime; IANA names and UTC only."""
    try:
        return datetime.fromisoformat(value["dateTime"]).replace(tzinfo=ZoneInfo(value["timeZone"]))
    except (KeyError, TypeError, ValueError, ZoneInfoNotFoundError):
        raise _graph_error(
            400, "ErrorInvalidRequest", "start and end must be dateTimeTimeZone values."
        ) from None


def _in_utc(event: dict[str, Any], start: datetime, end: datetime) -> dict[str, Any]:
    """calendarView shows start and end in UTC unless asked otherwise (Prefer: outlook.timezone)."""
    utc = "%Y-%m-%dT%H:%M:%S.0000000"
    return copy.deepcopy(event) | {
        "start": {"dateTime": start.astimezone(UTC).strftime(utc), "timeZone": "UTC"},
        "end": {"dateTime": end.astimezone(UTC).strftime(utc), "timeZone": "UTC"},
    }


def _series_days(master: dict[str, Any], until: date | None) -> Iterator[date]:
    """The days a daily or weekly series (the event resource's patternedRecurrence) occurs on, up to `until`
    (excluded) if given. Weeks start on Sunday (firstDayOfWeek's default)."""
    pattern, limits = master["recurrence"]["pattern"], master["recurrence"].get("range") or {}
    first = _parse_zoned(master["start"]).date()
    day = date.fromisoformat(limits["startDate"]) if limits.get("startDate") else first
    last = date.fromisoformat(limits["endDate"]) if limits.get("type") == "endDate" else None
    remaining = int(limits.get("numberOfOccurrences") or 0) if limits.get("type") == "numbered" else None
    interval = max(1, int(pattern.get("interval") or 1))
    weekdays = {_WEEKDAYS.index(name.lower()) for name in pattern.get("daysOfWeek") or []} or {
        first.weekday()
    }
    first_week = day - timedelta(days=(day.weekday() + 1) % 7)
    for offset in range(MAX_SERIES_DAYS):
        current = day + timedelta(days=offset)
        if (last and current > last) or (until and current >= until) or remaining == 0:
            return
        if pattern["type"] == "daily":
            hit = offset % interval == 0
        else:
            hit = current.weekday() in weekdays and ((current - first_week).days // 7) % interval == 0
        if hit:
            if remaining is not None:
                remaining -= 1
            yield current


def _page(status: int, message: str) -> Reply:
    content = (
        f"<!doctype html><html><body><h1>Sign in</h1><p id='error'>{html.escape(message)}</p></body></html>"
    )
    return status, {"Content-Type": "text/html; charset=utf-8"}, content.encode()


def _redirect(redirect_uri: str, params: dict[str, str]) -> Reply:
    location = f"{redirect_uri}{'&' if '?' in redirect_uri else '?'}{urlencode(params)}"
    return 302, {"Location": location}, b""
