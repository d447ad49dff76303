"""Token buckets shared by every web process, in Redis: one atomic script call per request checks (and
spends from) all the buckets the request draws on, by Redis's clock, and marks the first refusal of a
window and of a UTC day. Each bucket is a GCRA (one key: when the bucket is full again).

Without an answer from Redis within settings.AGENT_RATE_CHECK_TIMEOUT_MS the check fails open (counted in
`agentcal_rate_limit_failed_open_total`) and Redis is left alone for SHARED_BUCKETS_BACKOFF_SECONDS: a
limit must never turn a Redis outage into an outage of the API. Design: docs/architecture.md, "Guardrails".
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentcal.metrics import RATE_LIMIT_FAILED_OPEN

logger = logging.getLogger(__name__)

SHARED_BUCKETS_BACKOFF_SECONDS = 1.0

# KEYS: the n buckets, then for each bucket its "refused in this window" and "refused today" marks.
# ARGV: n, the window in ms, then per bucket its emission interval and its burst (µs, count).
# Returns: the index of the first bucket that refused (0: none), then per bucket: requests left,
# µs until full, µs until a request would pass; then per bucket whether this refusal is the first of
# its window and of its day (0 unless it refused).
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local refused = 0
local tats = {}
for i = 1, n do
  local interval = tonumber(ARGV[1 + 2 * i])
  local burst = tonumber(ARGV[2 + 2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  tats[i] = tat
  if refused == 0 and tat + interval - burst * interval > now then refused = i end
end
local out = {refused}
for i = 1, n do
  local interval = tonumber(ARGV[1 + 2 * i])
  local burst = tonumber(ARGV[2 + 2 * i])
  local tat = tats[i]
  if refused == 0 then
    tat = tat + interval
    redis.call('SET', KEYS[i], tostring(tat), 'PX', math.ceil((tat - now) / 1000) + 1)
  end
  local left = math.floor((now - (tat - burst * interval)) / interval)
  if left < 0 then left = 0 end
  local wait = tat + interval - burst * interval - now
  if wait < 0 then wait = 0 end
  out[#out + 1] = left
  out[#out + 1] = tat - now
  out[#out + 1] = wait
end
for i = 1, n do
  local first_in_window, first_today = 0, 0
  if i == refused then
    if redis.call('SET', KEYS[n + 2 * i - 1], '1', 'NX', 'PX', window_ms) then first_in_window = 1 end
    if redis.call('SET', KEYS[n + 2 * i], '1', 'NX', 'EX', 90000) then first_today = 1 end
  end
  out[#out + 1] = first_in_window
  out[#out + 1] = first_today
end
return out
"""

# A refusal that no bucket made (a budget, a pause): KEYS are its window's and its day's marks.
_MARKS_SCRIPT = """
local first_in_window, first_today = 0, 0
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', tonumber(ARGV[1])) then first_in_window = 1 end
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', 90000) then first_today = 1 end
return {first_in_window, first_today}
"""


class _Script:
    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()  # Redis names a cached script by its SHA-1


_BUCKETS = _Script(_SCRIPT)
_MARKS = _Script(_MARKS_SCRIPT)


@dataclass(frozen=True)
class Bucket:
    """`key` names the bucket (the caller's and the limit's, e.g. `agt_…:requests`); it holds `burst`
    requests and gains one back every 1/`per_second` seconds."""

    key: str
    per_second: float
    burst: int


@dataclass(frozen=True)
class BucketState:
    bucket: Bucket
    remaining: int
    full_in_seconds: float
    passes_in_seconds: float


@dataclass(frozen=True)
class Decision:
    """What the buckets said. `refused` is the bucket that refused (None: the request passed and spent a
    token from each); `first_in_window` / `first_today`: this refusal is its bucket's first within the
    audit window, or within the UTC day. `states` is empty when the check failed open."""

    states: tuple[BucketState, ...]
    refused: BucketState | None = None
    first_in_window: bool = False
    first_today: bool = False

    @property
    def failed_open(self) -> bool:
        return not self.states

    @property
    def retry_after_seconds(self) -> int:
        """Whole seconds until the refused request would pass (rounded up: waiting this long is enough)."""
        return max(1, math.ceil(self.refused.passes_in_seconds)) if self.refused else 0


FAILED_OPEN = Decision(states=())


class _Client:
    """This process's Redis connections for the buckets (one per thread, made anew after a fork) and the
    back-off. A script call is one packed EVALSHA written to the thread's connection and one reply read:
    redis-py's pool, retry and script wrappers around it cost more CPU than the call itself
    (docs/performance-notes.md, "The rate check's round trip")."""

    def __init__(self) -> None:
        self._pid = 0
        self._pool: Any = None
        self._local = threading.local()
        self._down_until = 0.0
        self._lock = threading.Lock()

    def _connection(self) -> Any:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    import redis

                    timeout = settings.AGENT_RATE_CHECK_TIMEOUT_MS / 1000
                    self._pool = redis.ConnectionPool.from_url(
                        str(settings.REDIS_URL), socket_connect_timeout=timeout, socket_timeout=timeout
                    )
                    self._local = threading.local()
                    self._pid = os.getpid()
        connection = getattr(self._local, "connection", None)
        if connection is None:
            # Not pool.make_connection(): that counts toward the pool's limit, and a thread's connection
            # is never handed back (it closes with the thread's end).
            pool = self._pool
            connection = self._local.connection = pool.connection_class(**pool.connection_kwargs)
        return connection

    def run(self, script: _Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The script's answer; raises on any failure (the connection is dropped, the next call makes
        another). A Redis that lost its script cache (a restart, SCRIPT FLUSH) gets the script's text."""
        from redis.exceptions import NoScriptError

        connection = self._connection()
        try:
            try:
                return self._call(connection, "EVALSHA", script.sha, keys, args)
            except NoScriptError:
                return self._call(connection, "EVAL", script.text, keys, args)
        except Exception:
            connection.disconnect()
            raise

    @staticmethod
    def _call(connection: Any, command: str, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        connection.send_packed_command(
            connection.pack_command(command, script, len(keys), *keys, *args), check_health=False
        )
        return connection.read_response()

    def backing_off(self) -> bool:
        return time.monotonic() < self._down_until

    def failed(self) -> None:
        self._down_until = time.monotonic() + SHARED_BUCKETS_BACKOFF_SECONDS

    def reset(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.disconnect()
            self._pid, self._pool, self._local, self._down_until = 0, None, threading.local(), 0.0


_client = _Client()


def _namespaced(key: str) -> str:
    # One namespace per database, so installations (and test databases) sharing a Redis stay apart.
    return f"agentcal:buckets:{settings.DATABASES['default']['NAME']}:{key}"


def take(buckets: Sequence[Bucket], *, window_seconds: int) -> Decision:
    """Spend one request from every bucket, or from none if any is empty (then `refused` says which)."""
    if _client.backing_off():
        RATE_LIMIT_FAILED_OPEN.inc()
        return FAILED_OPEN
    names = [_namespaced(b.key) for b in buckets]
    marks = [mark for name in names for mark in _marks(name)]
    args: list[Any] = [len(buckets), window_seconds * 1000]
    for bucket in buckets:
        args += [max(1, round(1_000_000 / bucket.per_second)), bucket.burst]
    try:
        out = _client.run(_BUCKETS, names + marks, args)
    except Exception as exc:  # noqa: BLE001 — any failure of Redis (or of its client) fails open
        logger.warning("rate limit check failed open: %s", type(exc).__name__)
        _client.failed()
        RATE_LIMIT_FAILED_OPEN.inc()
        return FAILED_OPEN
    refused_index = int(out[0])
    states = tuple(
        BucketState(
            bucket=bucket,
            remaining=int(out[1 + 3 * i]),
            full_in_seconds=int(out[2 + 3 * i]) / 1_000_000,
            passes_in_seconds=int(out[3 + 3 * i]) / 1_000_000,
        )
        for i, bucket in enumerate(buckets)
    )
    if not refused_index:
        return Decision(states=states)
    flags = out[1 + 3 * len(buckets) :]
    i = refused_index - 1
    return Decision(
        states=states,
        refused=states[i],
        first_in_window=bool(flags[2 * i]),
        first_today=bool(flags[2 * i + 1]),
    )


def _marks(name: str) -> tuple[str, str]:
    return f"{name}:refused", f"{name}:refused:{time.strftime('%Y%m%d', time.gmtime())}"


def mark_refusal(key: str, *, window_seconds: int) -> tuple[bool, bool]:
    """For a refusal no bucket made: is it the first of its window, and of the UTC day, under `key`?
    Without Redis, neither (what is not marked is counted in the metrics, never audited one by one)."""
    if _client.backing_off():
        return False, False
    try:
        first_in_window, first_today = _client.run(_MARKS, _marks(_namespaced(key)), [window_seconds * 1000])
    except Exception as exc:  # noqa: BLE001 — as in take(): Redis is never needed to answer
        logger.warning("refusal marks unavailable: %s", type(exc).__name__)
        _client.failed()
        return False, False
    return bool(first_in_window), bool(first_today)


def reset() -> None:
    """Forget this process's connection and back-off (tests that stop and start Redis)."""
    _client.reset()
