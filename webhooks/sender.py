"""One webhook delivery attempt: check the URL, pin its address, POST the signed body, report.

Retries, backoff and recording the attempt belong to the caller; this only makes one attempt and
describes what happened, and never raises for anything the network or the receiver does.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import certifi
import httpx
from django.conf import settings

from agentcal.retry_after import retry_after_seconds as parse_retry_after
from webhooks.signing import signed_headers
from webhooks.url_guard import UnsafeWebhookUrl, parse_webhook_url, resolve_pinned

EXCERPT_CHARS: Final = 1000
# Enough bytes for EXCERPT_CHARS characters in any encoding up to 4 bytes a character; the rest of
# the body is never read, so a receiver cannot make us buffer a large response.
_EXCERPT_BYTES: Final = 4 * EXCERPT_CHARS + 4


@dataclass(frozen=True)
class AttemptResult:
    status_code: int | None
    latency_ms: int
    response_excerpt: str
    error: str  # empty when the receiver answered with anything but a redirect
    retry_after_seconds: int | None

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code <= 299

    @property
    def gone(self) -> bool:
        # 410 is the receiver saying "stop sending": the caller disables the endpoint.
        return self.status_code == 410


def send_webhook(
    *, url: str, secret: str, msg_id: str, timestamp: int, body: bytes, timeout: float | None = None
) -> AttemptResult:
    started = time.monotonic()

    def failed(error: str) -> AttemptResult:
        return AttemptResult(
            status_code=None,
            latency_ms=_elapsed_ms(started),
            response_excerpt="",
            error=error,
            retry_after_seconds=None,
        )

    try:
        target = parse_webhook_url(url)
        pinned_ip = resolve_pinned(target.host, target.port)
        # Connect to the address that was checked, not to the name: resolving again at connect
        # time would let a DNS answer that changed since the check (rebinding) pick the target.
        pinned_url = target.url.copy_with(host=pinned_ip)
    except UnsafeWebhookUrl as exc:
        return failed(f"unsafe_url: {exc.reason}")
    except (httpx.InvalidURL, ValueError) as exc:
        return failed(f"unsafe_url: {exc}")

    seconds = float(settings.WEBHOOK_TIMEOUT_SECONDS if timeout is None else timeout)
    headers = signed_headers(secret=secret, msg_id=msg_id, timestamp=timestamp, body=body)
    # The Host header and, for https, the TLS server name and certificate check use the name the
    # agent registered, so virtual hosting and certificate verification work as without pinning.
    headers["host"] = target.netloc
    # An excerpt of a compressed body would be unreadable, and decompressing is a way to be made
    # to allocate far more than we read.
    headers["accept-encoding"] = "identity"
    extensions: dict[str, Any] = {}
    if target.url.scheme == "https":
        extensions["sni_hostname"] = target.host

    # httpx's timeout bounds each connect/read/write separately; a receiver that trickles its
    # body a byte at a time would never trip it, so the body read also stops at a deadline.
    deadline = started + seconds
    try:
        with (
            httpx.Client(
                timeout=httpx.Timeout(seconds),
                follow_redirects=False,
                verify=_tls_context(),
                # Proxy settings from the environment would send the request (and the choice of
                # address) to a proxy, undoing the pinning.
                trust_env=False,
            ) as client,
            client.stream(
                "POST", pinned_url, content=body, headers=headers, extensions=extensions
            ) as response,
        ):
            status_code = response.status_code
            retry_after = _parse_retry_after(response.headers.get("retry-after"), now=datetime.now(UTC))
            raw = _read_excerpt_bytes(response, deadline=deadline)
            excerpt = _decode_leniently(raw, charset=response.charset_encoding)
    except httpx.TimeoutException:
        return failed("timeout")
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ssl.SSLError) as exc:
        return failed(f"connection_error: {_describe(exc)}")

    return AttemptResult(
        status_code=status_code,
        latency_ms=_elapsed_ms(started),
        response_excerpt=excerpt,
        # A redirect is not followed (its target was never checked), so it cannot be a delivery.
        error="redirect_refused" if 300 <= status_code <= 399 else "",
        retry_after_seconds=retry_after,
    )


def _read_excerpt_bytes(response: httpx.Response, *, deadline: float) -> bytes:
    """The start of the body, for the attempt log; the status line alone decides the outcome.

    So a body that stalls, trickles or breaks off after the status arrived shortens the excerpt
    rather than turning an answered attempt into a failed one.
    """
    raw = bytearray()
    try:
        for chunk in response.iter_raw():
            raw += chunk
            if len(raw) >= _EXCERPT_BYTES or time.monotonic() > deadline:
                break
    except httpx.HTTPError:
        pass
    return bytes(raw[:_EXCERPT_BYTES])


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Built once: loading the CA bundle costs milliseconds per attempt. A client-side context is
    # safe to share between threads.
    return ssl.create_default_context(cafile=certifi.where())


def _elapsed_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def _decode_leniently(raw: bytes, *, charset: str | None) -> str:
    encoding = "utf-8"
    # An unknown charset label keeps utf-8: with replacement characters it is the best guess.
    if charset:
        with contextlib.suppress(LookupError):
            encoding = codecs.lookup(charset).name
    return raw.decode(encoding, errors="replace")[:EXCERPT_CHARS]


def _parse_retry_after(value: str | None, *, now: datetime) -> int | None:
    """Seconds from a Retry-After header (agentcal.retry_after: the one rule for every client)."""
    return parse_retry_after(value, now=now)


def _describe(exc: BaseException) -> str:
    message = str(exc) or type(exc).__name__
    return message[:250]  # enough to diagnose; the attempt log is not a traceback store
