"""The Celery app (worker and beat are started by `agentcal run`), and the guard that keeps beat single.

Workers scale out freely: every task is safe to run on any of them, and twice (claims are conditional
updates, sweeps take row locks). Beat must not: two beats send every periodic task twice, and a
deployment that starts beat on each of its nodes would multiply the sweeps by the number of nodes.
`SingletonScheduler` (settings.CELERY_BEAT_SCHEDULER) sends only while it holds a lock in Redis, the
broker every beat already needs; a second beat stands by, sending nothing, and takes over within
BEAT_LOCK_TTL_SECONDS of the first one dying (at once when it stops cleanly).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.beat import PersistentScheduler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentcal.settings")

app = Celery("agentcal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger(__name__)

BEAT_LOCK_KEY = "agentcal:beat:lock"
# Extend the lock only while we still own it (a beat that stalled past the TTL lost it to another).
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0"""


class BeatLock:
    """A lease in Redis: SET NX with a TTL, renewed by its owner, released by compare-and-delete."""

    def __init__(self, url: str, *, ttl_seconds: float, key: str = BEAT_LOCK_KEY) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.ttl_ms = int(ttl_seconds * 1000)
        self.key = key
        self.token = secrets.token_hex(16)
        self.held = False

    def hold(self) -> bool:
        """Keep (or take) the lock; False while another process holds it or Redis cannot be reached."""
        was_held = self.held
        try:
            renewed = self.held and bool(self.client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))
            self.held = renewed or bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))
        except redis.RedisError:
            # Without Redis nothing could be sent anyway (it is the broker); stand by until it is back.
            logger.warning("beat: cannot reach Redis for the beat lock; sending nothing", exc_info=True)
            self.held = False
        if self.held and not was_held:
            logger.info("beat: holding the beat lock; this beat sends the periodic tasks")
        elif was_held and not self.held:
            logger.warning("beat: lost the beat lock to another beat; standing by")
        return self.held

    def release(self) -> None:
        if self.held:
            try:
                self.client.eval(_RELEASE, 1, self.key, self.token)
            except redis.RedisError:
                logger.warning("beat: could not release the beat lock (it lapses by itself)", exc_info=True)
            self.held = False


class SingletonScheduler(PersistentScheduler):
    """Celery's persistent scheduler, sending only while this beat holds the beat lock.

    A standby neither sends nor opens the schedule file (two beats on one machine would share it); it
    opens it when it takes over, so the last-run times the previous beat saved carry on."""

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        from django.conf import settings

        ttl = float(settings.BEAT_LOCK_TTL_SECONDS)
        self.lock = BeatLock(app.conf.broker_url, ttl_seconds=ttl)
        # Renew well before the lease lapses; a standby looks as often.
        self.lock_check_seconds = ttl / 3
        self._schedule_open = False
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        # Deferred to the first tick holding the lock (tick below).
        pass

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if not self.lock.hold():
            return self.lock_check_seconds
        if not self._schedule_open:
            # The settings only name the file's folder (the data folder by default); beat makes it.
            Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
            super().setup_schedule()
            self._schedule_open = True
        return float(min(super().tick(*args, **kwargs), self.lock_check_seconds))

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.lock.release()
