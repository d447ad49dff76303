"""A fake of the Google Calendar API v3 and of Google's OAuth 2.0 endpoints: a real HTTP server on
127.0.0.1 (tests/sync/fake_http.py, shared with the Microsoft fake), so the product's httpx client talks
to it exactly as it would to Google, and a browser can click through its consent page.

Every behaviour follows a page of Google's documentation, named where it is implemented (paths below are
under developers.google.com):
- /identity/protocols/oauth2/web-server: the authorization endpoint and its consent page, the token
  endpoint (authorization_code with PKCE, refresh_token), revocation;
- /calendar/api/v3/reference/calendarList/list;
- /calendar/api/v3/reference/events/list, /events/insert, /events/update, /events/delete, /events/get;
- /calendar/api/guides/sync: sync tokens, nextSyncToken on the last page only, 410 fullSyncRequired;
- /calendar/api/v3/reference/events/watch, /channels/stop, /calendar/api/guides/push: channels and
  notifications;
- /calendar/api/guides/errors: the error bodies and reasons;
- /calendar/api/guides/auth: which scopes each method accepts.

Google's documented examples of error bodies are the model; exact messages and the `status` field are
unverified against live Google. Not modelled, and refused loudly (400 naming the fake) rather than
answered wrongly: recurrence expansion (singleEvents=true) and the list filters (timeMin, timeMax, q,
orderBy, updatedMin, iCalUID, extended properties).

Control API for tests: `register_client`, `signed_in`, `consent`, `issue_tokens`, `revoke`,
`expire_access_tokens`, `add_calendar`, `human_put`, `human_delete`, `events`, `expire_sync_tokens`,
`page_size`, `notify`, `channels`, `deliveries`, `wait_for_deliveries`, `settle`, `fail_next`, `count`,
`errors`, `close`.
"""

from __future__ import annotations

import base64
import email.utils
import html
import itertools
import json
import queue
import re
import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit
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

DEFAULT_ACCOUNT = "alice@example.com"
DEFAULT_CLIENT_ID = "agentcal-test.apps.googleusercontent.com"
DEFAULT_CLIENT_SECRET = "fake-client-secret"
SCOPE = "https://www.googleapis.com/auth/"
# /calendar/api/v3/reference/*: the scopes each method accepts (at least one of them).
CALENDAR_LIST_SCOPES = {SCOPE + s for s in ("calendar", "calendar.readonly", "calendar.calendarlist",
                                            "calendar.calendarlist.readonly")}  # fmt: skip
READ_EVENTS_SCOPES = {SCOPE + s for s in ("calendar", "calendar.readonly", "calendar.events",
                                          "calendar.events.readonly")}  # fmt: skip
WRITE_EVENTS_SCOPES = {SCOPE + "calendar", SCOPE + "calendar.events"}
ALL_CALENDAR_SCOPES = " ".join(sorted(CALENDAR_LIST_SCOPES | READ_EVENTS_SCOPES))
# events/watch: params.ttl "Default is 604800 seconds". Google also applies internal limits it does not
# publish ("the more restrictive value is used", guides/push); the fake takes the default as the cap.
DEFAULT_CHANNEL_TTL = 604800
MAX_CHANNEL_TTL = 604800
MAX_PAGE_SIZE = 2500  # events/list: "The page size can never be larger than 2500 events."
CODE_TTL = 600.0
CLIENT_ID_PATTERN = re.compile(r"[a-v0-9]{5,1024}")  # events/insert: base32hex, 5–1024 characters
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
PUSH_USER_AGENT = "APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)"
# guides/push: these answers acknowledge a notification; 500, 502, 503 and 504 are retried with
# exponential backoff (here 50 ms, 100 ms…, and `delivery_attempts` tries in all); anything else fails it.
PUSH_SUCCESS = {102, 200, 201, 202, 204}
PUSH_RETRY = {500, 502, 503, 504}
STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
    503: "UNAVAILABLE",
}  # fmt: skip
# guides/errors: the reason and message Google gives with each status, when a test names none.
DEFAULT_REASONS = {
    400: ("badRequest", "Bad Request"), 401: ("authError", "Invalid Credentials"),
    403: ("rateLimitExceeded", "Rate Limit Exceeded"), 404: ("notFound", "Not Found"),
    409: ("duplicate", "The requested identifier already exists."),
    410: ("deleted", "Resource has been deleted"), 412: ("conditionNotMet", "Precondition Failed"),
    429: ("rateLimitExceeded", "Rate Limit Exceeded"), 500: ("backendError", "Backend Error"),
    503: ("backendError", "Backend Error"),
}  # fmt: skip
SYNC_TOKEN_GONE = "Sync token is no longer valid, a full sync is required."
USAGE_LIMIT_REASONS = {"rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded", "dailyLimitExceeded"}


def api_error(
    status: int, reason: str = "", message: str = "", *, domain: str = "", location: str = "",
    location_type: str = "", headers: dict[str, str] | None = None,
) -> Refusal:  # fmt: skip
    """guides/errors: {"error": {"errors": [{domain, reason, message, location…}], "code", "message"}}."""
    default_reason, default_message = DEFAULT_REASONS.get(status, ("backendError", "Error"))
    reason, message = reason or default_reason, message or default_message
    detail = {
        "domain": domain or ("usageLimits" if reason in USAGE_LIMIT_REASONS else "global"),
        "reason": reason,
        "message": message,
    }
    if location:
        detail |= {"locationType": location_type or "parameter", "location": location}
    error: dict[str, Any] = {"errors": [detail], "code": status, "message": message}
    if status in STATUS_NAMES:
        error["status"] = STATUS_NAMES[status]
    return Refusal(json_reply(status, {"error": error}, headers, indent=1))


def oauth_error(status: int, error: str, description: str, headers: dict[str, str] | None = None) -> Refusal:
    """oauth2/web-server: the token endpoint answers {"error": code, "error_description": text}."""
    return Refusal(json_reply(status, {"error": error, "error_description": description}, headers, indent=1))


def _dumps(value: Any) -> bytes:
    return json.dumps(value, indent=1).encode()


def _rfc3339(moment: float) -> str:
    stamp = datetime.fromtimestamp(moment, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _new_id() -> str:
    """A server-assigned event id, in the same base32hex alphabet as Google's."""
    return base64.b32hexencode(secrets.token_bytes(15)).decode().lower()


@dataclass
class _Client:
    secret: str
    redirect_uris: set[str]


@dataclass
class _Consent:
    """An authorization request waiting on the consent page, or a code issued for one."""

    client_id: str
    redirect_uri: str
    state: str
    scopes: set[str]
    account: str
    code_challenge: str
    challenge_method: str
    offline: bool
    force_consent: bool
    include_granted: bool


@dataclass
class _Calendar:
    id: str
    summary: str
    resource_id: str
    time_zone: str = "UTC"
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed_at: dict[str, int] = field(default_factory=dict)  # event id → the change counter at its change


@dataclass
class _Membership:
    calendar_id: str
    primary: bool
    access_role: str


@dataclass
class _Listing:
    """A listing in progress: what a nextPageToken stands for."""

    calendar_id: str
    ids: list[str]
    offset: int
    snapshot: int  # the change counter when the listing began: its nextSyncToken continues from there
    epoch: int
    incremental: bool


@dataclass
class _Channel:
    id: str
    token: str
    address: str
    calendar_id: str
    resource_id: str
    resource_uri: str
    expiration: float
    message_number: int = 0


@dataclass(frozen=True)
class Delivery:
    """One attempt to deliver a notification: `status` is the receiver's answer, None if none came."""

    channel_id: str
    state: str
    message_number: int
    attempt: int
    status: int | None
    error: str | None
    headers: dict[str, str]

    @property
    def delivered(self) -> bool:
        return self.status in PUSH_SUCCESS


class GoogleFake(FakeHTTPServer):
    def __init__(self, *, access_token_ttl: int = 3600, delivery_attempts: int = 3) -> None:
        super().__init__()
        self.delivery_attempts = delivery_attempts
        self.signed_in = DEFAULT_ACCOUNT  # who is signed in to Google in "the browser"
        self.deliveries: list[Delivery] = []
        self.errors: list[str] = []  # the fake's own failures while serving (each answered with a 500)
        self._clients: dict[str, _Client] = {DEFAULT_CLIENT_ID: _Client(DEFAULT_CLIENT_SECRET, set())}
        self._pending: dict[str, _Consent] = {}
        self._consented: dict[tuple[str, str], set[str]] = {}
        # oauth2/web-server: a code is spent only when redeemed; revoking a token ends the grant's access
        # tokens too ("Revoking a token": "the refresh token and access tokens … are revoked").
        self._oauth = FakeOAuth(
            access_token_ttl=access_token_ttl, access_prefix="ya29.", refresh_prefix="1//", code_prefix="4/",
            burn_refused_codes=False, revoking_ends_access_tokens=True,
        )  # fmt: skip
        self._calendars: dict[str, _Calendar] = {}
        self._memberships: dict[str, list[_Membership]] = {}
        self._changes = itertools.count(1)
        self._last_change = 0
        self._epoch = 0
        self._sync_tokens: dict[str, tuple[str, int, int]] = {}  # token → (calendar id, change, epoch)
        self._listings: dict[str, _Listing] = {}
        self._channels: dict[str, _Channel] = {}
        self._outbox: queue.Queue[tuple[_Channel, str, int] | None] = queue.Queue()
        self.api_url = f"{self.url}/calendar/v3/"
        self.auth_url = f"{self.url}/o/oauth2/v2/auth"
        self.token_url = f"{self.url}/token"
        self.revoke_url = f"{self.url}/revoke"
        self._courier = threading.Thread(target=self._deliver_forever, daemon=True)
        self._courier.start()

    def close(self) -> None:
        self._outbox.put(None)
        self._courier.join(timeout=5)
        super().close()

    # -- control: OAuth ------------------------------------------------------------------------------

    def register_client(self, client_id: str, client_secret: str, redirect_uris: set[str]) -> None:
        with self._lock:
            self._clients[client_id] = _Client(client_secret, set(redirect_uris))

    def consent(self, authorization_url: str, *, allow: bool = True, scopes: set[str] | None = None) -> str:
        """What a person's browser does with the consent page (over HTTP: the page is fetched and its form
        posted): returns the Location the browser is sent to. `scopes` unticks the others (granular
        consent, oauth2/web-server "Handling incremental/granular consent")."""
        page = httpx.get(authorization_url, timeout=5, trust_env=False)
        if page.status_code != 200:
            raise AssertionError(f"consent page: HTTP {page.status_code}: {page.text[:200]}")
        request_id = re.search(r'name="consent" value="([^"]+)"', page.text)
        offered = [html.unescape(s) for s in re.findall(r'name="scope" value="([^"]+)"', page.text)]
        assert request_id is not None, "consent page without its form"
        ticked = [s for s in offered if scopes is None or s in scopes]
        form = [("consent", request_id.group(1)), ("decision", "allow" if allow else "deny")]
        form += [("scope", s) for s in ticked]
        answer = httpx.post(self.auth_url, content=urlencode(form), headers=FORM, timeout=5, trust_env=False)
        if answer.status_code != 302:
            raise AssertionError(f"consent: HTTP {answer.status_code}: {answer.text[:200]}")
        return answer.headers["Location"]

    def issue_tokens(
        self, account: str = DEFAULT_ACCOUNT, *, scope: str = ALL_CALENDAR_SCOPES,
        client_id: str = DEFAULT_CLIENT_ID,
    ) -> tuple[str, str]:  # fmt: skip
        """(access token, refresh token) as if `account` had consented to `scope`: for tests that are not
        about the consent."""
        with self._lock:
            grant = Grant(account, client_id, scope.split())
            refresh_token = self._oauth.new_refresh_token(grant)
            return self._oauth.new_access_token(grant, set(scope.split())), refresh_token

    def revoke(self, token: str) -> None:
        """The person removes AgentCal's access (or Google revokes it): the refresh token and every access
        token issued with it stop working."""
        with self._lock:
            self._oauth.revoke(token)

    def expire_access_tokens(self) -> None:
        with self._lock:
            self._oauth.expire_access_tokens()

    # -- control: calendars and the person editing them ------------------------------------------------

    def add_calendar(
        self, account: str, calendar_id: str, summary: str, *, primary: bool = False,
        access_role: str = "owner", time_zone: str = "UTC",
    ) -> None:  # fmt: skip
        """`calendar_id` in `account`'s calendar list; the same id for a second account shares it."""
        with self._lock:
            if calendar_id not in self._calendars:
                self._calendars[calendar_id] = _Calendar(
                    calendar_id, summary, secrets.token_urlsafe(20), time_zone
                )
            self._memberships.setdefault(account, []).append(_Membership(calendar_id, primary, access_role))

    def human_put(self, calendar_id: str, event: dict[str, Any]) -> dict[str, Any]:
        """A person creates or edits an event in Google Calendar. An exception to a series (with
        `recurringEventId` and `originalStartTime`) gets Google's instance id, `<master>_<start in UTC>`."""
        with self._lock:
            calendar = self._calendars[calendar_id]
            event_id = event.get("id") or self._instance_id(event) or _new_id()
            stored = self._store(calendar, event_id, event, organizer=self._owner(calendar_id))
            return json.loads(json.dumps(stored))

    def human_delete(self, calendar_id: str, event_id: str) -> None:
        """A person deletes an event: it stays, cancelled, so that incremental syncs can tell (and its id
        stays taken: events/insert answers 409 for it)."""
        with self._lock:
            calendar = self._calendars[calendar_id]
            if event_id not in calendar.events:
                raise KeyError(event_id)
            self._cancel(calendar, event_id)

    def events(self, calendar_id: str) -> list[dict[str, Any]]:
        """Every event of the calendar that is not cancelled, as stored."""
        with self._lock:
            stored = self._calendars[calendar_id].events.values()
            return [json.loads(json.dumps(e)) for e in stored if e.get("status") != "cancelled"]

    def expire_sync_tokens(self) -> None:
        """guides/sync: "Sometimes sync tokens are invalidated by the server": every token issued so far
        (and every incremental listing under way) answers 410 fullSyncRequired from now on."""
        with self._lock:
            self._epoch += 1

    # -- control: push and faults -------------------------------------------------------------------

    def notify(self, calendar_id: str, state: str = "exists") -> None:
        with self._lock:
            self._notify(calendar_id, state)

    def wait_for_deliveries(self, count: int, timeout: float = 5.0) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.deliveries) >= count:
                    return list(self.deliveries)
            time.sleep(0.01)
        raise AssertionError(f"expected {count} delivery attempt(s), got {len(self.deliveries)}")

    def settle(self, timeout: float = 5.0) -> None:
        """Waits until every notification queued so far has been delivered or given up on."""
        deadline = time.monotonic() + timeout
        while self._outbox.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._outbox.unfinished_tasks:
            raise AssertionError("notifications still queued")

    def channels(self, calendar_id: str) -> list[str]:
        with self._lock:
            return [c.id for c in self._channels.values() if c.calendar_id == calendar_id]

    def fail_next(
        self, status: int, *, times: int = 1, reason: str | None = None,
        retry_after: float | str | None = None, path_contains: str | None = None,
    ) -> None:  # fmt: skip
        """Answer the next `times` requests (whose path and query contain `path_contains`, or any) with a
        Google error of `status` instead of serving them. Reasons of usage limits come with the domain
        usageLimits, as in guides/errors."""
        self.add_fault(
            status, times=times, reason=reason, retry_after=retry_after, path_contains=path_contains
        )

    # -- the HTTP side -----------------------------------------------------------------------------------

    def route(self, request: FakeRequest) -> Reply:
        method, parts, query, body = request.method, urlsplit(request.target), request.query, request.body
        headers = {name.lower(): value for name, value in request.headers.items()}
        with self._lock:
            if parts.path == "/o/oauth2/v2/auth" and method == "GET":
                return self._authorize_page(query)
            if parts.path == "/o/oauth2/v2/auth" and method == "POST":
                return self._authorize_decision(body)
            if parts.path == "/token" and method == "POST":
                return self._token(headers, body)
            if parts.path == "/revoke" and method == "POST":
                return self._revoke_endpoint(query, body)
            segments = [unquote(segment) for segment in parts.path.split("/")[1:]]
            if segments[:2] != ["calendar", "v3"]:
                raise api_error(404)
            account, scopes = self._authenticate(headers)
            match (method, segments[2:]):
                case ("GET", ["users", "me", "calendarList"]):
                    self._require(scopes, CALENDAR_LIST_SCOPES)
                    return self._calendar_list(account, query)
                case ("GET", ["calendars", calendar_id, "events"]):
                    self._require(scopes, READ_EVENTS_SCOPES)
                    calendar = self._calendar_of(account, calendar_id)
                    return self._list(calendar, self._role(account, calendar), query)
                case ("POST", ["calendars", calendar_id, "events"]):
                    self._require(scopes, WRITE_EVENTS_SCOPES)
                    return self._insert(account, calendar_id, body)
                case ("POST", ["calendars", calendar_id, "events", "watch"]):
                    self._require(scopes, READ_EVENTS_SCOPES)
                    return self._watch(self._calendar_of(account, calendar_id), body)
                case ("GET", ["calendars", calendar_id, "events", event_id]):
                    self._require(scopes, READ_EVENTS_SCOPES)
                    return self._get(self._calendar_of(account, calendar_id), event_id)
                case ("PUT", ["calendars", calendar_id, "events", event_id]):
                    self._require(scopes, WRITE_EVENTS_SCOPES)
                    return self._update(account, calendar_id, event_id, headers, body)
                case ("DELETE", ["calendars", calendar_id, "events", event_id]):
                    self._require(scopes, WRITE_EVENTS_SCOPES)
                    return self._delete(account, calendar_id, event_id)
                case ("POST", ["channels", "stop"]):
                    self._require(scopes, CALENDAR_LIST_SCOPES | READ_EVENTS_SCOPES)
                    return self._stop(body)
            raise api_error(404)

    def refusal_for(self, fault: Fault, request: FakeRequest) -> Refusal:
        headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
        if request.target.startswith(("/token", "/revoke")):
            return oauth_error(fault.status, fault.reason or "server_error", "Injected fault", headers)
        return api_error(fault.status, fault.reason or "", headers=headers)

    def crash(self, request: FakeRequest, exc: Exception) -> Reply:
        self.errors.append(f"{request.method} {request.target}: {type(exc).__name__}: {exc}")
        return api_error(500).reply

    # -- OAuth 2.0: /identity/protocols/oauth2/web-server -----------------------------------------------

    def _authorize_page(self, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        client = self._clients.get(query.get("client_id", ""))
        # Errors in the client or redirect_uri are shown to the person, never redirected: the redirect
        # target is not trusted yet ("Authorization errors": invalid_client, redirect_uri_mismatch).
        if client is None:
            return _error_page(401, "invalid_client", "The OAuth client was not found.")
        redirect_uri = query.get("redirect_uri", "")
        if redirect_uri not in client.redirect_uris:
            return _error_page(400, "redirect_uri_mismatch", "The redirect URI is not registered.")
        scopes = set(query.get("scope", "").split())
        method = query.get("code_challenge_method", "plain" if query.get("code_challenge") else "")
        if query.get("response_type") != "code" or not scopes or method not in ("", "S256", "plain"):
            return _error_page(400, "invalid_request", "response_type, scope or code_challenge_method.")
        request_id = secrets.token_urlsafe(16)
        self._pending[request_id] = _Consent(
            client_id=query["client_id"], redirect_uri=redirect_uri, state=query.get("state", ""),
            scopes=scopes, account=query.get("login_hint") or self.signed_in,
            code_challenge=query.get("code_challenge", ""), challenge_method=method,
            offline=query.get("access_type") == "offline",
            force_consent="consent" in query.get("prompt", "").split(),
            include_granted=query.get("include_granted_scopes") == "true",
        )  # fmt: skip
        boxes = "".join(
            f'<li><label><input type="checkbox" name="scope" value="{html.escape(scope)}" checked> '
            f"{html.escape(scope.removeprefix(SCOPE))}</label></li>"
            for scope in sorted(scopes)
        )
        page = (
            "<!doctype html><html><head><title>Sign in - Google Accounts</title></head><body>"
            f"<h1>{html.escape(query['client_id'])} wants to access your Google Account</h1>"
            f'<p id="account">{html.escape(self._pending[request_id].account)}</p>'
            f'<form method="post" action="/o/oauth2/v2/auth">'
            f'<input type="hidden" name="consent" value="{request_id}"><ul>{boxes}</ul>'
            '<button type="submit" id="deny" name="decision" value="deny">Deny</button> '
            '<button type="submit" id="allow" name="decision" value="allow">Allow</button>'
            "</form></body></html>"
        )
        return 200, {"Content-Type": "text/html; charset=utf-8"}, page.encode()

    def _authorize_decision(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        form = parse_qs(body.decode(), keep_blank_values=True)
        pending = self._pending.pop((form.get("consent") or [""])[0], None)
        if pending is None:
            return _error_page(400, "invalid_request", "This consent page has expired.")
        granted = pending.scopes & set(form.get("scope", []))
        separator = "&" if "?" in pending.redirect_uri else "?"
        if (form.get("decision") or [""])[0] != "allow" or not granted:
            # "If the user does not approve the request, the response contains an error message":
            # error=access_denied, with the state.
            answer = {"error": "access_denied", "state": pending.state}
            return 302, {"Location": pending.redirect_uri + separator + urlencode(answer)}, b""
        key = (pending.account, pending.client_id)
        if pending.include_granted:  # include_granted_scopes: the new grant covers the earlier ones too
            granted |= self._consented.get(key, set())
        code = self._oauth.new_code(
            Code(
                Grant(pending.account, pending.client_id, sorted(granted)), pending.redirect_uri,
                pending.code_challenge or None, pending.challenge_method, time.time() + CODE_TTL,
                details={"offline": pending.offline, "force_consent": pending.force_consent},
            )
        )  # fmt: skip
        answer = {"code": code, "scope": " ".join(sorted(granted)), "state": pending.state}
        return 302, {"Location": pending.redirect_uri + separator + urlencode(answer)}, b""

    def _token(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        form = {name: values[-1] for name, values in parse_qs(body.decode(), keep_blank_values=True).items()}
        client_id = form.get("client_id", "")
        client = self._clients.get(client_id)
        if client is None or not secrets.compare_digest(client.secret, form.get("client_secret", "")):
            raise oauth_error(401, "invalid_client", "Unauthorized")
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            # Single use: spent once redeemed (a refused attempt, e.g. a wrong verifier, leaves it be);
            # PKCE (RFC 7636 §4.6) is named in oauth2/web-server step 1.
            try:
                code = self._oauth.redeem(
                    form.get("code", ""), client_id=client_id, redirect_uri=form.get("redirect_uri"),
                    verifier=form.get("code_verifier", ""),
                )  # fmt: skip
            except CodeRefused as refused:
                raise {
                    "redirect_mismatch": oauth_error(400, "redirect_uri_mismatch", "Bad Request"),
                    "verifier_missing": oauth_error(400, "invalid_grant", "Missing code verifier."),
                    "verifier": oauth_error(400, "invalid_grant", "Invalid code verifier."),
                }.get(refused.why, oauth_error(400, "invalid_grant", "Malformed auth code.")) from None
            scopes = set(code.grant.scopes)
            key = (code.grant.account, client_id)
            # "a refresh token … only the first time your application exchanges the authorization code",
            # unless prompt=consent asked again; and only for access_type=offline.
            first_time = key not in self._consented
            self._consented[key] = self._consented.get(key, set()) | scopes
            answer: dict[str, Any] = {"token_type": "Bearer", "scope": " ".join(sorted(scopes))}
            refresh_token = None
            if code.details["offline"] and (first_time or code.details["force_consent"]):
                refresh_token = self._oauth.new_refresh_token(code.grant)
                answer["refresh_token"] = refresh_token
            answer["access_token"] = self._oauth.new_access_token(
                code.grant, scopes, refreshable=refresh_token is not None
            )
        elif grant_type == "refresh_token":
            grant = self._oauth.grant_for(form.get("refresh_token", ""))
            if grant is None or grant.client_id != client_id:
                raise oauth_error(400, "invalid_grant", "Token has been expired or revoked.")
            # "Refreshing an access token (offline access)": no new refresh token in the answer.
            answer = {"token_type": "Bearer", "scope": " ".join(sorted(grant.scopes))}
            answer["access_token"] = self._oauth.new_access_token(grant, set(grant.scopes))
        else:
            raise oauth_error(400, "unsupported_grant_type", f"Invalid grant_type: {grant_type}")
        answer["expires_in"] = int(self._oauth.access_token_ttl)
        return (
            200,
            {"Content-Type": "application/json; charset=utf-8", "Cache-Control": "no-store"},
            _dumps(answer),
        )

    def _revoke_endpoint(self, query: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        """oauth2/web-server "Revoking a token": POST https://oauth2.googleapis.com/revoke with token=…"""
        form = {name: values[-1] for name, values in parse_qs(body.decode()).items()}
        try:
            self.revoke(form.get("token") or query.get("token", ""))
        except KeyError:
            raise oauth_error(400, "invalid_token", "Token expired or revoked") from None
        return 200, {"Content-Type": "application/json; charset=utf-8"}, b"{}"

    def _authenticate(self, headers: dict[str, str]) -> tuple[str, set[str]]:
        """guides/errors "401: Invalid Credentials": a missing, unknown, expired or revoked token."""
        try:
            issued = self._oauth.bearer(headers.get("authorization", ""))
        except TokenRefused:
            raise api_error(
                401, "authError", "Invalid Credentials", location="Authorization", location_type="header",
                headers={"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'},
            ) from None  # fmt: skip
        return issued.account, issued.scopes

    def _require(self, scopes: set[str], accepted: set[str]) -> None:
        if not scopes & accepted:
            raise api_error(
                403, "insufficientPermissions", "Request had insufficient authentication scopes.",
                headers={"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/", '
                         'error="insufficient_scope"'},
            )  # fmt: skip

    # -- calendarList.list -----------------------------------------------------------------------------

    def _calendar_list(self, account: str, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        # calendarList/list: maxResults defaults to 100, "can never be larger than 250".
        size = min(_positive(query, "maxResults", 100), 250, self.page_size or 250)
        memberships = self._memberships.get(account, [])
        try:
            start = int(query.get("pageToken") or 0)
        except ValueError:
            raise api_error(400, "invalid", "Invalid page token value.", location="pageToken") from None
        entries = []
        for membership in memberships[start : start + size]:
            calendar = self._calendars[membership.calendar_id]
            entry: dict[str, Any] = {
                "kind": "calendar#calendarListEntry", "etag": f'"{calendar.resource_id[:12]}"',
                "id": calendar.id, "summary": calendar.summary, "timeZone": calendar.time_zone,
                "accessRole": membership.access_role, "selected": True,
            }  # fmt: skip
            if membership.primary:
                entry["primary"] = True  # the field is absent for the other calendars
            entries.append(entry)
        page: dict[str, Any] = {"kind": "calendar#calendarList", "etag": '"p1"', "items": entries}
        if start + size < len(memberships):
            page["nextPageToken"] = str(start + size)
        else:
            page["nextSyncToken"] = secrets.token_urlsafe(12)
        return _json_answer(page)

    # -- events ------------------------------------------------------------------------------------------

    def _list(
        self, calendar: _Calendar, access_role: str, query: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        sync_token = query.get("syncToken")
        # events/list, syncToken: "There are several query parameters that cannot be specified together
        # with nextSyncToken…: iCalUID, orderBy, privateExtendedProperty, q, sharedExtendedProperty,
        # timeMin, timeMax, updatedMin."
        filters = ("iCalUID", "orderBy", "privateExtendedProperty", "q", "sharedExtendedProperty",
                   "timeMin", "timeMax", "updatedMin")  # fmt: skip
        for name in filters:
            if name in query and sync_token:
                raise api_error(400, "invalid", f"Sync token cannot be used with {name}.", location=name)
            if name in query:
                raise api_error(400, "invalid", f"GoogleFake does not implement {name}.", location=name)
        if query.get("singleEvents") == "true":
            raise api_error(
                400, "invalid", "GoogleFake does not expand recurring events.", location="singleEvents"
            )
        show_deleted = query.get("showDeleted") == "true"
        if sync_token and query.get("showDeleted") == "false":
            # guides/sync and events/list: deletions are always in an incremental result, "it is not
            # allowed to set showDeleted to False".
            raise api_error(
                400, "invalid", "showDeleted=false is not allowed with syncToken.", location="showDeleted"
            )
        size = min(_positive(query, "maxResults", 250), MAX_PAGE_SIZE, self.page_size or MAX_PAGE_SIZE)
        if sync_token:
            known = self._sync_tokens.get(sync_token)
            if known is None or known[0] != calendar.id or known[2] != self._epoch:
                # guides/sync: "the server will respond with a 410 GONE response code and the client should
                # clear its storage and perform a full synchronization without any syncToken."
                raise api_error(410, "fullSyncRequired", SYNC_TOKEN_GONE)
        page_token = query.get("pageToken")
        if page_token:
            listing = self._listings.get(page_token)
            if listing is None or listing.calendar_id != calendar.id:
                raise api_error(400, "invalid", "Invalid page token value.", location="pageToken")
            if listing.incremental and listing.epoch != self._epoch:
                raise api_error(410, "fullSyncRequired", SYNC_TOKEN_GONE)
        else:
            since = self._sync_tokens[sync_token][1] if sync_token else 0
            ordered = sorted(calendar.changed_at, key=calendar.changed_at.__getitem__)
            if sync_token:  # every change since the token, deletions included
                ids = [event_id for event_id in ordered if calendar.changed_at[event_id] > since]
            else:
                ids = [event_id for event_id in ordered if show_deleted or self._listed(calendar, event_id)]
            listing = _Listing(calendar.id, ids, 0, self._last_change, self._epoch, bool(sync_token))
        chunk = listing.ids[listing.offset : listing.offset + size]
        items = [self._as_listed(calendar.events[event_id]) for event_id in chunk]
        page: dict[str, Any] = {
            "kind": "calendar#events", "etag": f'"{self._last_change}"', "summary": calendar.summary,
            "updated": _rfc3339(time.time()), "timeZone": calendar.time_zone, "accessRole": access_role,
            "defaultReminders": [], "items": items,
        }  # fmt: skip
        if listing.offset + len(chunk) < len(listing.ids):
            token = secrets.token_urlsafe(18)
            self._listings[token] = replace(listing, offset=listing.offset + len(chunk))
            page["nextPageToken"] = token
        else:
            # guides/sync: "nextSyncToken … is provided only on the last page of the results".
            token = secrets.token_urlsafe(24)
            self._sync_tokens[token] = (calendar.id, listing.snapshot, self._epoch)
            page["nextSyncToken"] = token
        return _json_answer(page)

    def _listed(self, calendar: _Calendar, event_id: str) -> bool:
        """events/list, showDeleted: "Cancelled instances of recurring events (but not the underlying
        recurring event) will still be included if showDeleted and singleEvents are both False.\""""
        event = calendar.events[event_id]
        if event.get("status") != "cancelled":
            return True
        master = calendar.events.get(event.get("recurringEventId", ""))
        return master is not None and master.get("status") != "cancelled"

    @staticmethod
    def _as_listed(event: dict[str, Any]) -> dict[str, Any]:
        """Events resource: "Deleted events are only guaranteed to have the id field populated." A
        cancelled exception keeps what says which occurrence it cancels."""
        if event.get("status") != "cancelled":
            return event
        kept = ("kind", "etag", "id", "status", "updated", "recurringEventId", "originalStartTime")
        return {name: event[name] for name in kept if name in event}

    def _insert(self, account: str, calendar_id: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        calendar = self._writable(account, calendar_id)
        event = _json_body(body)
        event_id = event.get("id")
        if event_id is None:
            event_id = _new_id()
        elif not isinstance(event_id, str) or not CLIENT_ID_PATTERN.fullmatch(event_id):
            # events/insert, id: "characters allowed … are those used in base32hex encoding, i.e.
            # lowercase letters a-v and digits 0-9 …; the length of the ID must be between 5 and 1024".
            raise api_error(400, "invalid", "Invalid resource id value.", location="id")
        elif event_id in calendar.events:
            # "the ID must be unique per calendar": also once deleted (a cancelled event keeps its id).
            raise api_error(409, "duplicate", "The requested identifier already exists.")
        _check_times(event)
        stored = self._store(calendar, event_id, event, organizer=account, check_sequence=True)
        return _json_answer(stored, etag=stored["etag"])

    def _get(self, calendar: _Calendar, event_id: str) -> tuple[int, dict[str, str], bytes]:
        event = calendar.events.get(event_id)
        if event is None:
            raise api_error(404)
        # A deleted event is still there to read, with status "cancelled" (as on events/list).
        return _json_answer(event, etag=event["etag"])

    def _update(
        self, account: str, calendar_id: str, event_id: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        calendar = self._writable(account, calendar_id)
        current = calendar.events.get(event_id)
        if current is None:
            raise api_error(404)
        if_match = headers.get("if-match")
        if if_match and if_match != "*" and if_match != current["etag"]:
            # guides/errors "412: Precondition Failed": the etag sent with If-Match is not the current one.
            raise api_error(412, "conditionNotMet", "Precondition Failed", location="If-Match",
                            location_type="header")  # fmt: skip
        event = _json_body(body)
        _check_times(event)
        # An update replaces the event (events/update "does not support patch semantics"); its status
        # is the one sent, "confirmed" when none is: so an update can bring a deleted event back.
        stored = self._store(calendar, event_id, event, organizer=account, check_sequence=True)
        return _json_answer(stored, etag=stored["etag"])

    def _delete(self, account: str, calendar_id: str, event_id: str) -> tuple[int, dict[str, str], bytes]:
        calendar = self._writable(account, calendar_id)
        event = calendar.events.get(event_id)
        if event is None:
            raise api_error(404)
        if event.get("status") == "cancelled":
            # guides/errors "410: Gone" (reason deleted): deleting what is already deleted. The fake
            # answers this for every repeated delete; Google may also answer 404 or 204 here.
            raise api_error(410, "deleted", "Resource has been deleted")
        self._cancel(calendar, event_id)
        return 204, {}, b""

    def _writable(self, account: str, calendar_id: str) -> _Calendar:
        calendar = self._calendar_of(account, calendar_id)
        if self._role(account, calendar) not in ("owner", "writer"):
            raise api_error(403, "requiredAccessLevel", "You need to have writer access to this calendar.")
        return calendar

    def _role(self, account: str, calendar: _Calendar) -> str:
        return next(m.access_role for m in self._memberships[account] if m.calendar_id == calendar.id)

    def _calendar_of(self, account: str, calendar_id: str) -> _Calendar:
        """The calendar `account` reaches by this id ("primary": its primary calendar); 404 for any other."""
        for membership in self._memberships.get(account, []):
            if membership.calendar_id == calendar_id or (calendar_id == "primary" and membership.primary):
                return self._calendars[membership.calendar_id]
        raise api_error(404)

    def _owner(self, calendar_id: str) -> str:
        for account, memberships in self._memberships.items():
            if any(m.calendar_id == calendar_id and m.access_role == "owner" for m in memberships):
                return account
        return DEFAULT_ACCOUNT

    @staticmethod
    def _instance_id(event: dict[str, Any]) -> str | None:
        """Google names an exception `<master id>_<original start, UTC, basic format>` (a date for an
        all-day series)."""
        master, original = event.get("recurringEventId"), event.get("originalStartTime") or {}
        if not master or not original:
            return None
        if "date" in original:
            return f"{master}_{original['date'].replace('-', '')}"
        start = _parse_time(original, "originalStartTime").astimezone(UTC)
        return f"{master}_{start:%Y%m%dT%H%M%SZ}"

    def _store(
        self, calendar: _Calendar, event_id: str, fields: dict[str, Any], *, organizer: str,
        check_sequence: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        """Writes an event the way every write does: a new etag and `updated`, and `sequence` raised when
        the time moves (RFC 5545 SEQUENCE, which Google keeps), then notifies the calendar's channels."""
        now = time.time()
        previous = calendar.events.get(event_id)
        current_sequence = int(previous.get("sequence", 0)) if previous else 0
        sequence = fields.get("sequence", current_sequence)
        if check_sequence and (not isinstance(sequence, int) or sequence < current_sequence):
            raise api_error(400, "invalid", "Invalid sequence value. The specified sequence number is below "
                            "the current sequence number of the resource.", location="sequence")  # fmt: skip
        moved = previous is not None and (
            previous.get("start") != fields.get("start") or previous.get("end") != fields.get("end")
        )
        if moved and sequence == current_sequence:
            sequence += 1
        self._last_change = next(self._changes)
        server_fields = {"kind", "etag", "id", "htmlLink", "created", "updated", "creator", "organizer",
                         "iCalUID", "sequence"}  # fmt: skip
        event = {name: value for name, value in fields.items() if name not in server_fields}
        master = calendar.events.get(str(fields.get("recurringEventId", "")))
        ical_uid = (previous or {}).get("iCalUID") or (master or {}).get("iCalUID")
        event.update(
            kind="calendar#event",
            etag=f'"{self._last_change}{secrets.randbelow(10**6):06d}"',
            id=event_id,
            status=fields.get("status", "confirmed"),
            htmlLink=f"{self.url}/calendar/event?eid={event_id}",
            created=(previous or {}).get("created", _rfc3339(now)),
            updated=_rfc3339(now),
            iCalUID=ical_uid or fields.get("iCalUID") or f"{event_id}@google.com",
            sequence=sequence,
            creator={"email": organizer},
            organizer={"email": organizer, "self": True},
        )
        calendar.events[event_id] = event
        calendar.changed_at[event_id] = self._last_change
        self._notify(calendar.id, "exists")
        return event

    def _cancel(self, calendar: _Calendar, event_id: str) -> None:
        """Cancels the event; for a recurring master, its exceptions with it."""
        doomed = [event_id] + [
            other for other, event in calendar.events.items() if event.get("recurringEventId") == event_id
        ]
        for victim in doomed:
            event = calendar.events[victim]
            self._last_change = next(self._changes)
            event.update(
                status="cancelled", updated=_rfc3339(time.time()),
                etag=f'"{self._last_change}{secrets.randbelow(10**6):06d}"',
            )  # fmt: skip
            calendar.changed_at[victim] = self._last_change
        self._notify(calendar.id, "exists")

    # -- push: /calendar/api/guides/push, events/watch, channels/stop ---------------------------------------

    def _watch(self, calendar: _Calendar, body: bytes) -> tuple[int, dict[str, str], bytes]:
        request = _json_body(body)
        channel_id, address = str(request.get("id") or ""), str(request.get("address") or "")
        if not channel_id or len(channel_id) > 64:  # guides/push: "Maximum length: 64 characters."
            raise api_error(400, "invalid", "Invalid channel id.", location="id")
        if request.get("type") not in ("web_hook", "webhook"):
            raise api_error(400, "invalid", "Invalid channel type.", location="type")
        host = urlsplit(address).hostname or ""
        if not address.startswith("https://") and not (address.startswith("http://") and host in (
            "127.0.0.1", "localhost", "::1")):  # fmt: skip
            # guides/push: the address must be HTTPS. The fake lets plain HTTP to loopback through: its
            # receivers in tests have no certificate.
            raise api_error(400, "push.webhookUrlNotHttps", f"WebHook callback must be HTTPS: {address}")
        if channel_id in self._channels:
            raise api_error(400, "channelIdNotUnique", "Channel id not unique")
        try:
            ttl = int((request.get("params") or {}).get("ttl", DEFAULT_CHANNEL_TTL))
            if ttl <= 0:
                raise ValueError(ttl)
        except (TypeError, ValueError):
            raise api_error(400, "invalid", f"Invalid ttl value for channel {channel_id}") from None
        expiration = time.time() + min(ttl, MAX_CHANNEL_TTL)
        if request.get("expiration"):  # a requested expiration (ms since the epoch) can only shorten it
            expiration = min(expiration, int(request["expiration"]) / 1000)
        resource_uri = f"{self.api_url}calendars/{quote(calendar.id, safe='')}/events?alt=json"
        channel = _Channel(channel_id, str(request.get("token") or ""), address, calendar.id,
                           calendar.resource_id, resource_uri, expiration)  # fmt: skip
        self._channels[channel_id] = channel
        # guides/push "Sync message": sent right after the channel is created.
        self._enqueue(channel, "sync")
        answer = {
            "kind": "api#channel", "id": channel_id, "resourceId": calendar.resource_id,
            "resourceUri": resource_uri, "expiration": str(int(expiration * 1000)),
        }  # fmt: skip
        if channel.token:
            answer["token"] = channel.token
        return _json_answer(answer)

    def _stop(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        request = _json_body(body)
        channel = self._channels.get(str(request.get("id") or ""))
        if channel is None or channel.resource_id != request.get("resourceId"):
            raise api_error(404, "notFound", f"Channel '{request.get('id')}' not found for project")
        del self._channels[channel.id]
        return 204, {}, b""

    def _notify(self, calendar_id: str, state: str) -> None:
        """guides/push: every live channel on the calendar hears of a change (made by anyone, the watcher
        included). The notification names no event: the receiver lists with its sync token."""
        now = time.time()
        for channel in list(self._channels.values()):
            if channel.calendar_id == calendar_id and channel.expiration > now:
                self._enqueue(channel, state)

    def _enqueue(self, channel: _Channel, state: str) -> None:
        # guides/push: message numbers start at 1 with the sync message and increase.
        channel.message_number += 1
        self._outbox.put((channel, state, channel.message_number))

    def _deliver_forever(self) -> None:
        """One courier in the background, in order, as the `X-Goog-Message-Number`s go up."""
        with httpx.Client(timeout=5.0, trust_env=False, follow_redirects=False) as http:
            while True:
                item = self._outbox.get()
                try:
                    if item is None:
                        return
                    self._deliver(http, *item)
                finally:
                    self._outbox.task_done()

    def _deliver(self, http: httpx.Client, channel: _Channel, state: str, number: int) -> None:
        headers = {
            "X-Goog-Channel-ID": channel.id,
            "X-Goog-Channel-Expiration": email.utils.formatdate(channel.expiration, usegmt=True),
            "X-Goog-Message-Number": str(number),
            "X-Goog-Resource-ID": channel.resource_id,
            "X-Goog-Resource-State": state,
            "X-Goog-Resource-URI": channel.resource_uri,
            "User-Agent": PUSH_USER_AGENT,
        }
        if channel.token:
            headers["X-Goog-Channel-Token"] = channel.token
        for attempt in range(1, self.delivery_attempts + 1):
            status: int | None = None
            error: str | None = None
            try:
                status = http.post(channel.address, headers=headers, content=b"").status_code
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self.deliveries.append(Delivery(channel.id, state, number, attempt, status, error, headers))
            if status in PUSH_SUCCESS or (status is not None and status not in PUSH_RETRY):
                return
            time.sleep(0.05 * 2 ** (attempt - 1))


def _positive(query: dict[str, str], name: str, default: int) -> int:
    try:
        value = int(query.get(name, default))
    except ValueError:
        value = 0
    if value < 1:
        raise api_error(400, "invalid", f"Invalid value for {name}.", location=name)
    return value


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        raise api_error(400, "parseError", "Parse Error") from None
    if not isinstance(value, dict):
        raise api_error(400, "parseError", "Parse Error")
    return value


def _json_answer(value: dict[str, Any], *, etag: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json; charset=UTF-8"}
    if etag:
        headers["ETag"] = etag
    return 200, headers, _dumps(value)


def _error_page(status: int, error: str, detail: str) -> tuple[int, dict[str, str], bytes]:
    title = f"Error {status}: {error}"
    page = f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{detail}</p>"
    return status, {"Content-Type": "text/html; charset=utf-8"}, page.encode()


def _parse_time(moment: dict[str, Any], name: str) -> datetime:
    """An EventDateTime's dateTime: "A time zone offset is required unless a time zone is explicitly
    specified in timeZone." """
    try:
        value = datetime.fromisoformat(str(moment["dateTime"]))
        if value.tzinfo is None:
            value = value.replace(tzinfo=ZoneInfo(str(moment["timeZone"])))
    except (KeyError, ValueError, ZoneInfoNotFoundError):
        message = f"Missing time zone definition for {name.removesuffix('Time')} time."
        raise api_error(400, "required", message, location=name) from None
    return value


def _check_times(event: dict[str, Any]) -> None:
    """events/insert: start and end are required; guides/errors: an end before the start is
    timeRangeEmpty."""
    start, end = event.get("start"), event.get("end")
    for name, moment in (("start", start), ("end", end)):
        if not isinstance(moment, dict) or not ({"date", "dateTime"} & moment.keys()):
            raise api_error(400, "required", f"Missing {name} time.", location=name)
    assert isinstance(start, dict) and isinstance(end, dict)
    if ("date" in start) != ("date" in end):
        raise api_error(400, "invalid", "Start and end times must either both be date or both be dateTime.")
    if "date" in start:
        empty = str(end["date"]) < str(start["date"])
    else:
        empty = _parse_time(end, "end") < _parse_time(start, "start")
    if empty:
        raise api_error(400, "timeRangeEmpty", "The specified time range is empty.", location="end",
                        domain="calendar")  # fmt: skip
