"""Token buckets in this process's memory, for what may be reached without a key (a peer address, a
workspace id as written in a URL, a key's public prefix): cheap to ask, bounded in memory, no database
and no Redis, so a flood costs the flooder's bucket and nothing else."""

from __future__ import annotations

import threading
import time

from django.conf import settings

# Buckets kept before full ones are forgotten (a full bucket is the same as none).
MAX_BUCKETS = 10_000


class RateLimiter:
    """A token bucket per key (a peer IP, ...): `per_minute` tokens, refilled smoothly."""

    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.refill_per_second = per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at monotonic time)
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if len(self._buckets) > MAX_BUCKETS:
                self._forget_full(now)
            tokens, at = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - at) * self.refill_per_second)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return False
            self._buckets[key] = (tokens - 1.0, now)
            return True

    def seconds_until_allowed(self, key: str) -> float:
        """0 when `allow(key)` would pass now; else how long until it would (nothing is spent)."""
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - at) * self.refill_per_second)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.refill_per_second

    def _forget_full(self, now: float) -> None:
        # Keys may be many (a webhook's keys include the workspace id from the URL, any id a client makes
        # up), but only those that used their bucket within the last refill are kept.
        for key, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * self.refill_per_second >= self.capacity:
                del self._buckets[key]


# In this process, each made again when its setting changes (tests change settings).
_limiters: dict[str, RateLimiter] = {}
_limiters_lock = threading.Lock()


def reset() -> None:
    """Forget every bucket (tests: each starts with full budgets)."""
    with _limiters_lock:
        _limiters.clear()


def limiter_for(setting: str) -> RateLimiter:
    """The process's bucket set for a `…_PER_MINUTE…` setting."""
    per_minute: int = getattr(settings, setting)
    limiter = _limiters.get(setting)
    if limiter is None or limiter.capacity != per_minute:
        with _limiters_lock:
            limiter = _limiters.get(setting)
            if limiter is None or limiter.capacity != per_minute:
                limiter = _limiters[setting] = RateLimiter(per_minute)
    return limiter
