"""Celery messages are published from one background thread per process, never from a request.

Publishing waits on the broker: with Redis down, a refused connection takes about 2 s to give up
(redis-py retries). The database rows are what guarantee the work (the outbox, the approval), a
message only says "do it now", so no request may wait for it. A request thread only appends here,
under a lock, and returns; the publisher thread does the waiting:

- `nudge(task)`: "there is work" for a task that takes no arguments and finds its work in the
  database (the outbox dispatcher). Nudges of a task that is already pending collapse into one; at
  most one round of nudges goes out per NUDGE_MIN_INTERVAL_SECONDS, and one skipped inside the
  interval goes out at its end. While the broker is in back-off, nudges wait for the back-off to end.
  `nudge(task, items=ids)` collapses the same way, into one `task(sorted ids)` message carrying every
  id nudged meanwhile (write-behind of changed calendars: one message per interval, not per write).
- `enqueue(task, args, fallback=...)`: a message that must not be lost. If the broker refuses it (or
  is in back-off), the publisher thread calls `fallback` instead.

Call both from `transaction.on_commit`: a worker must not pick up work whose rows are not committed.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connections

logger = logging.getLogger(__name__)

# Under load one nudge per process per interval is enough (each costs a broker round trip): a running
# dispatcher drains the whole outbox.
NUDGE_MIN_INTERVAL_SECONDS = 0.2
# After the broker refused a message, do not knock again for a while: nudges wait (the periodic catch-up
# finds the rows anyway) and jobs go straight to their fallback instead of each waiting ~2 s for a
# refusal, which would let the queue back up behind a dead broker.
BROKER_BACKOFF_SECONDS = 10.0
# Jobs are approval emails and replays, one per request at most; a thousand waiting means the thread
# is stuck (a fallback hanging on SMTP, say), and growing further would only eat the process's memory.
MAX_QUEUED_JOBS = 1000
# At exit (a gunicorn worker restarting) queued jobs get this long to go out before they are logged as lost.
DRAIN_AT_EXIT_SECONDS = 5.0


@dataclass(frozen=True)
class _Job:
    task: Any  # a Celery task (untyped)
    args: tuple[Any, ...]
    fallback: Callable[[], object]


class _Publisher:
    """The queue, the nudge and back-off state, and the thread that publishes, for one process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # One condition for every change: the thread waits on it for work, `wait_idle` for the end of it.
        self._changed = threading.Condition()
        self._jobs: deque[_Job] = deque()
        # By task name: a nudge already pending absorbs the next ones (and their items).
        self._nudges: dict[str, tuple[Any, set[Any]]] = {}
        self._next_nudge_at = 0.0  # time.monotonic()
        self._broker_down_until = 0.0
        self._busy = False
        self._thread: threading.Thread | None = None

    # --- Called from request threads: only the lock, never the broker. ---

    def nudge(self, task: Any, items: Iterable[Any]) -> None:
        with self._changed:
            pending = self._nudges.get(task.name)
            if pending is not None:
                # The thread already knows of this task's nudge (a wake per write was a measurable part
                # of a write's CPU under load): the items only join it.
                pending[1].update(items)
                return
            self._nudges[task.name] = (task, set(items))
            self._wake()

    def enqueue(self, job: _Job) -> None:
        with self._changed:
            if len(self._jobs) >= MAX_QUEUED_JOBS:
                logger.error(
                    "the broker queue is full (%d jobs): dropping %s%r; its fallback will not run either",
                    MAX_QUEUED_JOBS,
                    job.task.name,
                    job.args,
                )
                return
            self._jobs.append(job)
            self._wake()

    def wait_idle(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: not self._jobs and not self._nudges and not self._busy, timeout
            )

    def backing_off(self) -> bool:
        return time.monotonic() < self._broker_down_until

    def clear_backoff(self) -> None:
        with self._changed:
            self._broker_down_until = 0.0
            self._changed.notify_all()

    def drop_nudges(self) -> None:
        with self._changed:
            self._nudges.clear()
            self._changed.notify_all()

    def _wake(self) -> None:
        # Started on first use rather than at import: most processes that import this (manage.py
        # commands, migrations) never publish anything.
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="agentcal-broker", daemon=True)
            self._thread.start()
        self._changed.notify_all()

    # --- The publisher thread. ---

    def _run(self) -> None:
        while True:
            with self._changed:
                self._busy = False
                self._changed.notify_all()
                while (work := self._take()) is None:
                    self._changed.wait(self._seconds_until_nudge())
                self._busy = True
            try:
                work()
            except Exception:  # never let one bad job end the thread: every later message would pile up
                logger.exception("the broker publisher failed")

    def _take(self) -> Callable[[], None] | None:
        """The next thing to do, if any is due; called with the lock held."""
        if self._jobs:
            job = self._jobs.popleft()
            return lambda: self._publish(job)
        if self._nudges and self._seconds_until_nudge() == 0:
            nudges = list(self._nudges.values())
            self._nudges.clear()
            self._next_nudge_at = time.monotonic() + NUDGE_MIN_INTERVAL_SECONDS
            return lambda: self._send_nudges(nudges)
        return None

    def _seconds_until_nudge(self) -> float | None:
        if not self._nudges:
            return None  # nothing to time: wait until woken
        due_at = max(self._next_nudge_at, self._broker_down_until)
        return max(0.0, due_at - time.monotonic())

    def _send_nudges(self, nudges: list[tuple[Any, set[Any]]]) -> None:
        for task, items in nudges:
            try:
                task.apply_async((sorted(items),) if items else (), retry=False)
            except Exception as exc:
                self._broker_refused(exc, task.name)
                return  # the rest would be refused too; their rows wait for the catch-up

    def _publish(self, job: _Job) -> None:
        with self._changed:
            broker_up = time.monotonic() >= self._broker_down_until
        if broker_up:
            try:
                job.task.apply_async(job.args, retry=False)
                return
            except Exception as exc:
                self._broker_refused(exc, job.task.name)
        try:
            job.fallback()
        except Exception:
            logger.exception("the fallback for %s%r failed", job.task.name, job.args)
        finally:
            # The fallback may have used the ORM: this long-lived thread must not keep a connection open.
            connections.close_all()

    def _broker_refused(self, exc: Exception, task_name: str) -> None:
        logger.warning(
            "could not publish %s (%s); backing off for %gs",
            task_name,
            type(exc).__name__,
            BROKER_BACKOFF_SECONDS,
        )
        with self._changed:
            self._broker_down_until = time.monotonic() + BROKER_BACKOFF_SECONDS


_publisher_lock = threading.Lock()
_publisher: _Publisher | None = None


def _current() -> _Publisher:
    global _publisher
    publisher = _publisher
    if publisher is None or publisher.pid != os.getpid():
        # First use in this process, or a forked child (gunicorn's workers): the parent's thread did not
        # survive the fork, and what is in its queue is the parent's to send.
        with _publisher_lock:
            if _publisher is None or _publisher.pid != os.getpid():
                _publisher = _Publisher()
            publisher = _publisher
    return publisher


def nudge(task: Any, *, items: Iterable[Any] = ()) -> None:
    """Ask for `task()` to run soon — `task(sorted items)` with `items` — coalesced with the task's other
    nudges meanwhile; lost while the broker is down."""
    _current().nudge(task, items)


def enqueue(task: Any, args: tuple[Any, ...], *, fallback: Callable[[], object]) -> None:
    """Publish `task(*args)` from the background thread; if the broker refuses it, call `fallback()` there."""
    _current().enqueue(_Job(task=task, args=args, fallback=fallback))


def wait_idle(timeout: float) -> bool:
    """Wait until everything queued (pending nudges included) has been published or handled."""
    return _current().wait_idle(timeout)


def backing_off() -> bool:
    """Has the broker refused a message within the last BROKER_BACKOFF_SECONDS?"""
    return _current().backing_off()


def clear_backoff() -> None:
    """Forget a broker failure: the next message tries the broker again at once (tests; a fixed broker)."""
    _current().clear_backoff()


@atexit.register
def _drain_at_exit() -> None:
    publisher = _publisher
    if publisher is None or publisher.pid != os.getpid():
        return
    publisher.drop_nudges()  # the catch-up covers these; only jobs are worth waiting for
    if not publisher.wait_idle(DRAIN_AT_EXIT_SECONDS):
        logger.error("exiting with broker jobs still queued: they are lost")
