"""What the fakes of Google Calendar (google_fake.py) and Microsoft 365 (graph_fake.py) share: a real HTTP
server on 127.0.0.1 (ThreadingHTTPServer in a thread, so the product's httpx clients talk to it as they
would to the provider), a log of every request, JSON answers, faults the test injects, and one OAuth 2.0
server (RFC 6749 authorization codes with RFC 7636 PKCE, bearer access tokens with a lifetime, refresh
tokens, revocation). Each fake keeps its provider's dialect: its paths, pages and error bodies.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Reply = tuple[int, dict[str, str], bytes]
MAX_REQUEST_BYTES = 1024 * 1024


class Refusal(Exception):
    """Ends a request with this answer (an error, in the provider's shape)."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply[0])
        self.reply = reply


def json_reply(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None, *, indent: int | None = None
) -> Reply:
    content = json.dumps(body, indent=indent).encode()
    return status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, content


@dataclass(frozen=True)
class FakeRequest:
    method: str
    target: str  # the path and query, as sent
    path: str
    query: dict[str, str]  # the last value of each parameter
    headers: Message
    body: bytes

    def form(self) -> dict[str, str]:
        return {
            key: values[-1] for key, values in parse_qs(self.body.decode(), keep_blank_values=True).items()
        }


@dataclass
class Fault:
    """The next `remaining` matching requests are answered with an error of `status` instead of served."""

    status: int
    remaining: int
    reason: str | None
    retry_after: str | None
    path_contains: str | None


class FakeHTTPServer:
    """A provider's fake: `route` answers a request (or raises Refusal), `refusal_for` turns an injected
    fault into the provider's error, `crash` answers a bug in the fake. Requests are logged (`count`)
    and faults taken under `_lock`, before `route`."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # A page "may be less than" what the client asks for (both providers say so): tests cap it.
        self.page_size: int | None = None
        self._requests: list[tuple[str, str]] = []  # (method, path and query)
        self._faults: list[Fault] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll: shutdown() waits for the loop to notice, half a second by default.
        self._serving = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._serving.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def count(self, path_contains: str | None = None, *, method: str | None = None) -> int:
        """Requests received whose path and query contain `path_contains` (any, if None) and, if given,
        of `method`, faults included."""
        with self._lock:
            return sum(
                1
                for sent, target in self._requests
                if (path_contains is None or path_contains in target) and (method is None or sent == method)
            )

    def add_fault(
        self, status: int, *, times: int, reason: str | None, retry_after: float | str | None,
        path_contains: str | None,
    ) -> None:  # fmt: skip
        header = None if retry_after is None else str(retry_after)
        if isinstance(retry_after, float) and retry_after.is_integer():
            header = str(int(retry_after))
        with self._lock:
            self._faults.append(Fault(status, times, reason, header, path_contains))

    def route(self, request: FakeRequest) -> Reply:
        raise NotImplementedError

    def fault_applies(self, fault: Fault, request: FakeRequest) -> bool:
        return fault.path_contains is None or fault.path_contains in request.target

    def refusal_for(self, fault: Fault, request: FakeRequest) -> Refusal:
        raise NotImplementedError

    def crash(self, request: FakeRequest, exc: Exception) -> Reply:
        raise NotImplementedError

    def _answer(self, request: FakeRequest) -> Reply:
        try:
            with self._lock:
                self._requests.append((request.method, request.target))
                self._take_fault(request)
            return self.route(request)
        except Refusal as refusal:
            return refusal.reply
        except Exception as exc:  # a bug in the fake: answered as the provider would, kept for the test
            return self.crash(request, exc)

    def _take_fault(self, request: FakeRequest) -> None:
        for fault in self._faults:
            if self.fault_applies(fault, request):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                raise self.refusal_for(fault, request)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body leave in one write: no delayed-ACK stall per answer

            def serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_REQUEST_BYTES:
                    self.send_error(413)
                    return
                body = self.rfile.read(length)
                parts = urlsplit(self.path)
                query = {
                    key: values[-1] for key, values in parse_qs(parts.query, keep_blank_values=True).items()
                }
                request = FakeRequest(self.command, self.path, parts.path, query, self.headers, body)
                status, headers, content = fake._answer(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = serve

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test output is no place for an access log

        return Handler


# --- OAuth 2.0 ----------------------------------------------------------------------------------------


def s256(verifier: str) -> str:
    """RFC 7636 §4.2: BASE64URL(SHA256(ASCII(code_verifier))), unpadded."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass
class Grant:
    """One consent: what its refresh tokens stand for; revoking it ends them all."""

    account: str
    client_id: str
    scopes: list[str]
    revoked: bool = False


@dataclass
class AccessToken:
    account: str
    scopes: set[str]
    expires_at: float  # time.time()
    grant: Grant | None


@dataclass
class Code:
    """An authorization code waiting to be redeemed. `details`: what the fake's dialect needs later."""

    grant: Grant
    redirect_uri: str
    challenge: str | None
    method: str  # "S256" or "plain"
    expires_at: float
    used: bool = False
    details: dict[str, Any] = field(default_factory=dict)


class CodeRefused(Exception):
    """A code that cannot be redeemed, and why (each fake answers each reason in its own words):
    unknown, used, expired, redirect_mismatch, verifier_missing, verifier."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class TokenRefused(Exception):
    """A bearer token that does not work, and why: missing, unknown or expired."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class FakeOAuth:
    """Codes, grants and tokens. The dialects differ in a few documented ways, which are parameters:
    whether a refused redemption burns the code, and whether revoking a grant ends its access tokens at
    once (Google) or leaves them to expire (Microsoft)."""

    def __init__(
        self, *, access_token_ttl: float, access_prefix: str, refresh_prefix: str, code_prefix: str = "",
        burn_refused_codes: bool, revoking_ends_access_tokens: bool,
    ) -> None:  # fmt: skip
        self.access_token_ttl = access_token_ttl
        self.access_prefix, self.refresh_prefix, self.code_prefix = access_prefix, refresh_prefix, code_prefix
        self.burn_refused_codes = burn_refused_codes
        self.revoking_ends_access_tokens = revoking_ends_access_tokens
        self._codes: dict[str, Code] = {}
        self._refresh_tokens: dict[str, Grant] = {}
        self._access_tokens: dict[str, AccessToken] = {}

    def new_code(self, code: Code) -> str:
        value = self.code_prefix + secrets.token_urlsafe(32)
        self._codes[value] = code
        return value

    def redeem(self, value: str, *, client_id: str, redirect_uri: str | None, verifier: str) -> Code:
        """The code's grant, once (RFC 6749 §4.1.3; PKCE: RFC 7636 §4.6). Raises CodeRefused."""
        code = self._codes.get(value)
        if code is None or code.grant.client_id != client_id:
            raise CodeRefused("unknown")
        if code.used:
            raise CodeRefused("used")
        if code.expires_at <= time.time():
            raise CodeRefused("expired")
        if self.burn_refused_codes:
            code.used = True
        if redirect_uri != code.redirect_uri:
            raise CodeRefused("redirect_mismatch")
        if code.challenge is not None:
            if not verifier:
                raise CodeRefused("verifier_missing")
            expected = s256(verifier) if code.method == "S256" else verifier
            if not secrets.compare_digest(expected, code.challenge):
                raise CodeRefused("verifier")
        code.used = True
        return code

    def new_access_token(self, grant: Grant, scopes: set[str], *, refreshable: bool = True) -> str:
        """`refreshable`: issued with the grant's refresh token, so revoking that may end it too."""
        token = self.access_prefix + secrets.token_urlsafe(48)
        expires_at = time.time() + self.access_token_ttl
        linked = grant if refreshable else None
        self._access_tokens[token] = AccessToken(grant.account, set(scopes), expires_at, linked)
        return token

    def new_refresh_token(self, grant: Grant) -> str:
        token = self.refresh_prefix + secrets.token_urlsafe(48)
        self._refresh_tokens[token] = grant
        return token

    def grant_for(self, refresh_token: str) -> Grant | None:
        """The grant a refresh token stands for, while it is not revoked."""
        grant = self._refresh_tokens.get(refresh_token)
        return grant if grant is not None and not grant.revoked else None

    def knows_refresh_token(self, refresh_token: str) -> bool:
        return refresh_token in self._refresh_tokens

    def bearer(self, authorization: str) -> AccessToken:
        """The access token an Authorization header carries, if it is known and alive; else TokenRefused."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise TokenRefused("missing")
        issued = self._access_tokens.get(token)
        if issued is None:
            raise TokenRefused("unknown")
        if issued.expires_at <= time.time():
            raise TokenRefused("expired")
        return issued

    def revoke(self, token: str) -> None:
        """A refresh token (its grant: every refresh token of it) or an access token. KeyError if unknown."""
        access = self._access_tokens.get(token)
        grant = access.grant if access is not None else self._refresh_tokens.get(token)
        if grant is None and access is None:
            raise KeyError("unknown token")
        if grant is not None:
            grant.revoked = True
        if access is not None:
            del self._access_tokens[token]
        if self.revoking_ends_access_tokens:
            for name, issued in list(self._access_tokens.items()):
                if issued.grant is not None and issued.grant.revoked:
                    del self._access_tokens[name]

    def expire_access_tokens(self) -> None:
        """Every access token issued so far stops working before its time (a password changed)."""
        for issued in self._access_tokens.values():
            issued.expires_at = 0.0
