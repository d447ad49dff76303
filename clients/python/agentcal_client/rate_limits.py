"""The agent's request budget as the server last described it, and the pacing that follows from it.

Every answer of the agent API carries `RateLimit-Limit` (the bucket's size), `RateLimit-Remaining`
(requests left now), `RateLimit-Reset` (seconds until the bucket is full again) and `RateLimit-Policy`
(`<burst>;w=<seconds to refill from empty>`). A client that has seen Remaining reach 0 waits for the next
token before sending, instead of spending a round trip on a certain 429; the server's 429 and its
Retry-After stay the authority when this estimate is off (the transport retries those).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["RateLimit", "parse_rate_limit"]


@dataclass(frozen=True, kw_only=True)
class RateLimit:
    """The RateLimit-* headers of the last answer that carried them (`client.rate_limit`)."""

    limit: int  # requests the bucket holds (the burst)
    remaining: int  # requests left when the answer was sent
    reset_seconds: int  # seconds from then until the bucket is full again
    window_seconds: int | None  # seconds the bucket takes to refill from empty (RateLimit-Policy's w)
    read_at: datetime  # when this client read the answer (UTC)

    @property
    def seconds_per_request(self) -> float:
        """How long the bucket takes to give one request back: a full refill spread over the burst."""
        if self.window_seconds is not None and self.window_seconds > 0:
            return self.window_seconds / self.limit
        # Without a policy: Reset is the time to refill what is missing now.
        return self.reset_seconds / max(1, self.limit - self.remaining)


def _whole_number(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    return int(value[:9]) if value.isascii() and value.isdigit() else None


def _policy_window(value: str | None) -> int | None:
    """`w` of the first policy in a RateLimit-Policy header (`10;w=20`, possibly `, …` more)."""
    if value is None:
        return None
    first = value.split(",", 1)[0]
    for parameter in first.split(";")[1:]:
        name, _, raw = parameter.partition("=")
        if name.strip().lower() == "w":
            return _whole_number(raw)
    return None


def parse_rate_limit(headers: Mapping[str, str], *, read_at: datetime | None = None) -> RateLimit | None:
    """The RateLimit-* headers of an answer, or None when any of Limit, Remaining or Reset is absent or
    not a whole number (a proxy's answer, an older server): no guess is better than a wrong one."""
    limit = _whole_number(headers.get("RateLimit-Limit"))
    remaining = _whole_number(headers.get("RateLimit-Remaining"))
    reset = _whole_number(headers.get("RateLimit-Reset"))
    if limit is None or remaining is None or reset is None or limit == 0:
        return None
    return RateLimit(
        limit=limit,
        remaining=min(remaining, limit),
        reset_seconds=reset,
        window_seconds=_policy_window(headers.get("RateLimit-Policy")),
        read_at=read_at or datetime.now(UTC),
    )


class Pacer:
    """One client's view of its bucket, shared by every thread or task sending through that client.

    When the last answer left no request, each caller in turn is given the next free moment (one token's
    refill after the one before), so several callers waiting together are spread out rather than all
    sent at once into a 429.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held only briefly, never across a wait: safe in asyncio too
        self.last: RateLimit | None = None
        self._next_free: float | None = None  # monotonic time the next request may go; None: now
        self._interval = 0.0

    def observe(self, headers: Mapping[str, str]) -> None:
        """Learn from one answer's headers (any status: a 429 says Remaining 0 too)."""
        seen_at = time.monotonic()
        rate_limit = parse_rate_limit(headers)
        if rate_limit is None:
            return
        with self._lock:
            self.last = rate_limit
            if rate_limit.remaining > 0:
                self._next_free = None
                return
            self._interval = rate_limit.seconds_per_request
            first_token_at = seen_at + self._interval
            # Callers already given a later moment will spend the tokens before it: keep their queue.
            self._next_free = max(first_token_at, self._next_free or first_token_at)

    def reserve(self, *, at_most: float) -> float:
        """Seconds to wait before sending, and that moment taken from the queue; 0 when the bucket was
        not seen empty, or when the wait would exceed `at_most` (then send now and let the server's
        answer decide, rather than wait for an answer that cannot arrive in time)."""
        with self._lock:
            if self._next_free is None:
                return 0.0
            wait = self._next_free - time.monotonic()
            if wait <= 0:
                self._next_free = None
                return 0.0
            if wait > at_most:
                return 0.0
            self._next_free += self._interval
            return wait
