"""Process-local copies of rows read on every API request (API keys with their agent and workspace,
calendar settings), so a request does not pay a PostgreSQL round trip for each.

A change to a watched row (a save or delete through the ORM, or a `.update()` followed by
`rows_changed()`) reaches every process within a second, Redis up or down: a copy is used only while
it was read under the current generation token, the poller read that token less than FRESH_SECONDS
ago, and the copy is younger than MAX_AGE_SECONDS. The request path never talks to Redis.

Design: docs/architecture.md, "Caches in each process".
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)


def redis_key() -> str:
    """The generation's key: one per database, so installations (or test databases) that share a Redis
    do not disturb each other's caches."""
    return f"agentcal:cached-rows:{settings.DATABASES['default']['NAME']}:generation"


POLL_SECONDS = 0.1
FRESH_SECONDS = 0.5
MAX_AGE_SECONDS = 10.0
# How long the poller waits on Redis; longer than FRESH_SECONDS would only delay noticing an outage.
REDIS_TIMEOUT_SECONDS = 0.25
RETRY_SECONDS = 1.0

V = TypeVar("V")


class _Generation:
    """The token this process trusts, kept current by the poller thread (one per process)."""

    def __init__(self) -> None:
        self.token: bytes | None = None
        self.fresh_until = 0.0  # time.monotonic()
        self._caches: list[LocalCache[Any]] = []
        self._lock = threading.Lock()
        self._pid = 0
        self._client: Any = None
        self._unpublished = False  # a change whose new token is not written yet
        self._wake = threading.Event()

    # --- The request path: memory only. ---

    def current(self) -> bytes | None:
        """The token copies must carry to be used now, or None: trust no copy (poller not fresh)."""
        if self._pid != os.getpid():
            self._start()
        if time.monotonic() >= self.fresh_until:
            return None
        return self.token

    def register(self, cache: LocalCache[Any]) -> None:
        with self._lock:
            self._caches.append(cache)

    def forget_all(self) -> None:
        for cache in list(self._caches):
            cache.clear()

    # --- Changes. ---

    def changed(self) -> None:
        """A watched row changed in the current transaction: drop this process's copies now (what this
        transaction reads next is its own new state), and once it commits, again (a copy another
        thread read meanwhile is the old state), and tell the other processes (the new token)."""
        self.forget_all()
        transaction.on_commit(self._publish_change)

    def _publish_change(self) -> None:
        if self._pid != os.getpid():
            self._start()
        with self._lock:
            self.fresh_until = 0.0  # trust nothing until the poller has written the new token
            self._unpublished = True
        self.forget_all()
        # The poller writes the new token at once: the request that made the change never waits on
        # Redis (a refused connection can take seconds), and a write that fails is retried by it.
        self._wake.set()

    # --- The poller thread. ---

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            # A new process (first use, or a fork): nothing inherited is trusted, and it needs its own
            # thread and its own Redis connection.
            self._pid = os.getpid()
            self.token, self.fresh_until, self._client = None, 0.0, None
            for cache in self._caches:
                cache.clear()
            thread = threading.Thread(target=self._poll_forever, name="agentcal-cached-rows", daemon=True)
            thread.start()

    def _redis(self) -> Any:
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(
                str(settings.REDIS_URL),
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                retry=None,  # a failed read is simply a poll that did not refresh; the next one retries
            )
        return self._client

    def _poll_forever(self) -> None:
        pid = os.getpid()
        while self._pid == pid:
            wait = POLL_SECONDS if self.poll_once() else RETRY_SECONDS
            self._wake.wait(wait)
            self._wake.clear()

    def poll_once(self) -> bool:
        """Write a new token if this process changed a watched row, then read the token: on success
        extend the trust, on a new token drop every copy first."""
        started = time.monotonic()
        try:
            client = self._redis()
            if self._unpublished:
                self._unpublished = False
                try:
                    client.set(redis_key(), secrets.token_hex(16).encode())
                except Exception:
                    self._unpublished = True  # the other processes must still hear of it
                    raise
            token = client.get(redis_key())
            if token is None:  # Redis lost it (restarted empty): a fresh token makes every process re-read
                client.set(redis_key(), secrets.token_hex(16).encode(), nx=True)
                token = client.get(redis_key())
        except Exception as exc:  # noqa: BLE001 — Redis away: stop trusting copies, read PostgreSQL
            with self._lock:
                self.fresh_until = 0.0
                self.token = None
            self.forget_all()
            logger.debug("cached rows: the generation could not be read (%s)", type(exc).__name__)
            return False
        with self._lock:
            if token != self.token:
                self.token = None  # copies read under the old token stop matching before they go
                self.forget_all()
                self.token = token
            self.fresh_until = started + FRESH_SECONDS
        return True


generation = _Generation()


def rows_changed() -> None:
    """Call inside the transaction of a change the ORM's signals do not see (a queryset `.update()`
    or raw SQL) to a row that LocalCache copies are made of."""
    generation.changed()


class LocalCache(Generic[V]):
    """A bounded LRU of copies of model rows, each used only while the generation it was read under is
    current (see the module docstring). What `get` returns is shared with other requests (and threads):
    hand out copies of anything a caller might change."""

    def __init__(self, name: str, max_entries: int = 10_000) -> None:
        self.name = name
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[V, bytes, float]] = OrderedDict()
        self._lock = threading.Lock()
        generation.register(self)

    def token(self) -> bytes | None:
        """The token to `put` a row under: read it *before* reading the row, so a change that lands
        while the row is being read leaves a copy that no longer matches."""
        return generation.current()

    def get(self, key: Hashable) -> V | None:
        token = generation.current()
        if token is None:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            value, read_under, read_at = entry
            if read_under != token or time.monotonic() - read_at > MAX_AGE_SECONDS:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V, token: bytes | None) -> None:
        if token is None:
            return
        with self._lock:
            self._entries[key] = (value, token, time.monotonic())
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def watch(*models: Any) -> None:
    """Drop every process's copies when a row of these models is saved or deleted through the ORM
    (connected once, from the apps' ready())."""
    from django.db.models.signals import post_delete, post_save

    def on_change(sender: Any, **kwargs: Any) -> None:
        generation.changed()

    for model in models:
        post_save.connect(on_change, sender=model, weak=False, dispatch_uid=f"local_cache:{model}")
        post_delete.connect(on_change, sender=model, weak=False, dispatch_uid=f"local_cache:{model}:del")
