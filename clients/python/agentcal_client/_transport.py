"""HTTP with the retry rules agents get wrong when they write them by hand.

Every write carries an Idempotency-Key made once per logical call and reused by each of its retries.
Only what waiting can fix is retried (errors.is_retryable), with decorrelated jitter or the server's
Retry-After, bounded by `max_retries` and a total deadline per call. Every answer's RateLimit-* headers
are read (rate_limits.Pacer); once the agent's bucket is seen empty, the next request first waits for a
token, within the same deadline. `RetryBudget` and the pacer are shared by the sync and async
transports; only sleeping and sending differ.

Why: docs/agents.md, "What the client does for you, and why".
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import httpx

from agentcal_client._version import __version__
from agentcal_client.errors import (
    AgentCalError,
    APIConnectionError,
    APITimeoutError,
    is_retryable,
)
from agentcal_client.problems import error_from_response
from agentcal_client.rate_limits import Pacer

logger = logging.getLogger("agentcal_client")

T = TypeVar("T")

DEFAULT_BASE_URL = "http://localhost:8000"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FIRST_WAIT_SECONDS = 0.5
MAX_WAIT_SECONDS = 30.0
# Longest Retry-After obeyed as such; a longer one ends the retries (the deadline would pass anyway).
MAX_RETRY_AFTER_SECONDS = 60.0


@dataclass(frozen=True)
class Request:
    """One API request, described; the transport sends it (and resends it on retries)."""

    method: str
    path: str  # below the base URL, e.g. "/holds/hld_123"
    params: Mapping[str, str] | None = None
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Call(Generic[T]):
    """A request and how to read its successful response."""

    request: Request
    parse: Callable[[httpx.Response], T]


def new_idempotency_key() -> str:
    return f"agentcal-py-{uuid.uuid4().hex}"


def isoformat(moment: datetime) -> str:
    """An aware datetime as the API's RFC 3339 UTC form; a naive one is refused (its zone is a guess)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} has no time zone: pass an aware datetime (e.g. tzinfo=UTC)")
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP-date), None if absent or garbled."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value[:7]))  # seven digits already mean "longer than any wait we obey"
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # an HTTP-date is always GMT
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def api_base_url(base_url: str) -> str:
    """The API root: the server's URL with /v1, whether or not it was given with it."""
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


class RetryBudget:
    """The retries left to one logical call: how long to wait before the next attempt, or None when the
    error is final (not retryable, no retries left, or the wait would pass the deadline)."""

    def __init__(self, *, max_retries: int, deadline_seconds: float) -> None:
        self.retries_left = max_retries
        self.deadline = time.monotonic() + deadline_seconds
        self.previous_wait = FIRST_WAIT_SECONDS
        self.attempts = 1

    def wait_before_retry(self, error: AgentCalError) -> float | None:
        if not is_retryable(error) or self.retries_left <= 0:
            return None
        if error.retry_after is not None:
            if error.retry_after > MAX_RETRY_AFTER_SECONDS:
                return None
            wait = error.retry_after
        else:
            wait = min(MAX_WAIT_SECONDS, random.uniform(FIRST_WAIT_SECONDS, self.previous_wait * 3))
        if time.monotonic() + wait > self.deadline:
            return None
        self.previous_wait = max(wait, FIRST_WAIT_SECONDS)
        self.retries_left -= 1
        self.attempts += 1
        return wait

    def longest_pacing_wait(self) -> float:
        """The longest wait for the rate limit worth taking before an attempt: one that leaves the
        deadline unpassed and is no longer than a Retry-After we would obey. Pacing spends no retry."""
        return min(MAX_RETRY_AFTER_SECONDS, self.deadline - time.monotonic())


@dataclass(frozen=True)
class Settings:
    api_key: str
    base_url: str
    timeout: float
    max_retries: int
    retry_deadline: float

    @property
    def headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.api_key}",
            "Accept": "application/json",
            "User-Agent": f"agentcal-client-python/{__version__}",
        }


def _prepared(
    settings: Settings, request: Request, idempotency_key: str | None
) -> tuple[str, dict[str, str]]:
    headers = {**settings.headers, **request.headers}
    if request.method in WRITE_METHODS:
        headers["Idempotency-Key"] = idempotency_key or new_idempotency_key()
    return settings.base_url + request.path, headers


def _error_for(response: httpx.Response) -> AgentCalError:
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    return error_from_response(
        response.status_code,
        body,
        text=response.text if body is None else "",
        request_id=response.headers.get("X-Request-ID"),
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
    )


def _no_response(exc: httpx.TransportError, request: Request) -> AgentCalError:
    what = f"{request.method} {request.path}"
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{what}: no response in time ({type(exc).__name__})")
    return APIConnectionError(f"{what}: {type(exc).__name__}: {exc}")


def _give_up(error: AgentCalError, budget: RetryBudget) -> AgentCalError:
    if budget.attempts > 1:
        error.add_note(f"agentcal_client: gave up after {budget.attempts} attempts")
    return error


def _log_pacing(request: Request, wait: float) -> None:
    logger.info(
        "%s %s: no requests left in the rate limit; waiting %.2f s", request.method, request.path, wait
    )


def _log_retry(request: Request, error: AgentCalError, wait: float) -> None:
    logger.info("%s %s failed (%s); retrying in %.2f s", request.method, request.path, error, wait)


class SyncTransport:
    def __init__(self, settings: Settings, http_client: httpx.Client | None) -> None:
        self.settings = settings
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=settings.timeout)
        self.pacer = Pacer()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def run(
        self,
        call: Call[T],
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
    ) -> T:
        return call.parse(
            self.send(call.request, idempotency_key=idempotency_key, timeout=timeout, max_retries=max_retries)
        )

    def send(
        self,
        request: Request,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
    ) -> httpx.Response:
        url, headers = _prepared(self.settings, request, idempotency_key)
        budget = RetryBudget(
            max_retries=self.settings.max_retries if max_retries is None else max_retries,
            deadline_seconds=self.settings.retry_deadline,
        )
        while True:
            pacing = self.pacer.reserve(at_most=budget.longest_pacing_wait())
            if pacing > 0:
                _log_pacing(request, pacing)
                time.sleep(pacing)
            try:
                response = self._http.request(
                    request.method,
                    url,
                    params=request.params,
                    json=request.json,
                    headers=headers,
                    timeout=timeout if timeout is not None else self.settings.timeout,
                )
            except httpx.TransportError as exc:
                error = _no_response(exc, request)
            else:
                self.pacer.observe(response.headers)
                if response.status_code < 400:
                    return response
                error = _error_for(response)
            wait = budget.wait_before_retry(error)
            if wait is None:
                raise _give_up(error, budget)
            _log_retry(request, error, wait)
            time.sleep(wait)


class AsyncTransport:
    def __init__(self, settings: Settings, http_client: httpx.AsyncClient | None) -> None:
        self.settings = settings
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=settings.timeout)
        self.pacer = Pacer()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def run(
        self,
        call: Call[T],
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
    ) -> T:
        response = await self.send(
            call.request, idempotency_key=idempotency_key, timeout=timeout, max_retries=max_retries
        )
        return call.parse(response)

    async def send(
        self,
        request: Request,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
    ) -> httpx.Response:
        url, headers = _prepared(self.settings, request, idempotency_key)
        budget = RetryBudget(
            max_retries=self.settings.max_retries if max_retries is None else max_retries,
            deadline_seconds=self.settings.retry_deadline,
        )
        while True:
            pacing = self.pacer.reserve(at_most=budget.longest_pacing_wait())
            if pacing > 0:
                _log_pacing(request, pacing)
                await asyncio.sleep(pacing)
            try:
                response = await self._http.request(
                    request.method,
                    url,
                    params=request.params,
                    json=request.json,
                    headers=headers,
                    timeout=timeout if timeout is not None else self.settings.timeout,
                )
            except httpx.TransportError as exc:
                error = _no_response(exc, request)
            else:
                self.pacer.observe(response.headers)
                if response.status_code < 400:
                    return response
                error = _error_for(response)
            wait = budget.wait_before_retry(error)
            if wait is None:
                raise _give_up(error, budget)
            _log_retry(request, error, wait)
            await asyncio.sleep(wait)
