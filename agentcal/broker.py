"""Celery messages, by registered task name, published from one background thread per process.

Publishing waits on the broker (with Redis down, ~2 s to give up), so no request does it: a request only
appends here, under a lock, and the publisher thread does the waiting. The database rows guarantee the
work; a message only says "do it now". `nudge_on_commit(name, items=ids)`: "there is work", coalesced to
one message per task per NUDGE_MIN_INTERVAL_SECONDS carrying every id meanwhile. `enqueue_on_commit(name,
args, fallback=...)`: a message that must not be lost; if the broker refuses it, this thread runs the
fallback (RUN_HERE: the task itself). docs/architecture.md ("Celery messages") has the design.
"""

from __future__ import annotations

import atexit
import enum
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from celery import Task, current_app
from django.db import connections, transaction

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


class Fallback(enum.Enum):
    # The task's own code, called in the publisher thread: for work whose message is only a way to get
    # it off the request (an email, a replay), doing it late here beats losing it.
    RUN_HERE = "run the task in this process"


RUN_HERE = Fallback.RUN_HERE


@dataclass(frozen=True)
class _Job:
    task_name: str
    args: tuple[Any, ...]
    fallback: Callable[[], object] | Fallback | None


class _Publisher:
    """The queue, the nudge and back-off state, and the thread that publishes, for one process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # One condition for every change: the thread waits on it for work, `wait_idle` for the end of it.
        self._changed = threading.Condition()
        self._jobs: deque[_Job] = deque()
        # By task name: a nudge already pending absorbs the next ones (and their items).
        self._nudges: dict[str, set[Any]] = {}
        self._next_nudge_at = 0.0  # time.monotonic()
        self._broker_down_until = 0.0
        self._busy = False
        self._thread: threading.Thread | None = None

    # --- Called from request threads: only the lock, never the broker. ---

    def nudge(self, task_name: str, items: Iterable[Any]) -> None:
        with self._changed:
            pending = self._nudges.get(task_name)
            if pending is not None:
                # The thread already knows of this task's nudge (a wake per write was a measurable part
                # of a write's CPU under load): the items only join it.
                pending.update(items)
                return
            self._nudges[task_name] = set(items)
            self._wake()

    def enqueue(self, job: _Job) -> None:
        with self._changed:
            if len(self._jobs) >= MAX_QUEUED_JOBS:
                logger.error(
                    "the broker queue is full (%d jobs): dropping %s%r; its fallback will not run either",
                    MAX_QUEUED_JOBS,
                    job.task_name,
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
            nudges = list(self._nudges.items())
            self._nudges.clear()
            self._next_nudge_at = time.monotonic() + NUDGE_MIN_INTERVAL_SECONDS
            return lambda: self._send_nudges(nudges)
        return None

    def _seconds_until_nudge(self) -> float | None:
        if not self._nudges:
            return None  # nothing to time: wait until woken
        due_at = max(self._next_nudge_at, self._broker_down_until)
        return max(0.0, due_at - time.monotonic())

    def _send_nudges(self, nudges: list[tuple[str, set[Any]]]) -> None:
        for task_name, items in nudges:
            try:
                current_app.send_task(task_name, (sorted(items),) if items else (), retry=False)
            except Exception as exc:
                self._broker_refused(exc, task_name)
                return  # the rest would be refused too; their rows wait for the catch-up

    def _publish(self, job: _Job) -> None:
        with self._changed:
            broker_up = time.monotonic() >= self._broker_down_until
        if broker_up:
            try:
                current_app.send_task(job.task_name, job.args, retry=False)
                return
            except Exception as exc:
                self._broker_refused(exc, job.task_name)
        if job.fallback is None:
            return  # the rows are the work: a periodic sweep finds them
        try:
            if job.fallback is RUN_HERE:
                registered_task(job.task_name)(*job.args)
            else:
                job.fallback()
        except Exception:
            logger.exception("the fallback for %s%r failed", job.task_name, job.args)
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


def nudge(task_name: str, *, items: Iterable[Any] = ()) -> None:
    """Ask for the task to run soon — with `items`, as `task(sorted items)` — coalesced with the task's
    other nudges meanwhile; lost while the broker is down. Call it after the commit."""
    _current().nudge(task_name, items)


def nudge_on_commit(task_name: str, *, items: Iterable[Any] = ()) -> None:
    """`nudge` once the current transaction commits (at once outside one); nothing if it rolls back."""
    transaction.on_commit(functools.partial(nudge, task_name, items=tuple(items)))


def enqueue(
    task_name: str, args: tuple[Any, ...], *, fallback: Callable[[], object] | Fallback | None
) -> None:
    """Publish `task(*args)` from the background thread; if the broker refuses it, that thread calls
    `fallback()`, runs the task itself (RUN_HERE) or, with None, leaves the work to a sweep."""
    _current().enqueue(_Job(task_name=task_name, args=args, fallback=fallback))


def enqueue_on_commit(
    task_name: str, args: tuple[Any, ...], *, fallback: Callable[[], object] | Fallback | None
) -> None:
    """`enqueue` once the current transaction commits (at once outside one); nothing if it rolls back:
    a worker must not pick up work whose rows are not committed."""
    transaction.on_commit(functools.partial(enqueue, task_name, args, fallback=fallback))


def registered_task(task_name: str) -> Task:
    """The task registered under this name. A web process has not imported the tasks modules (it only
    publishes, by name), so they are imported on first need, as a worker imports them at start."""
    if task_name not in current_app.tasks:
        current_app.autodiscover_tasks(force=True)
    return current_app.tasks[task_name]


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
