"""The workloads, each run by real threads against whatever a worker talks to.

A scenario knows nothing about HTTP, psycopg or Django: it calls `open_worker(i)` inside thread `i`
(so each thread has its own connection), then `worker.reserve(...)` or, for the mix and the flood, the
engine client's hold / commit / release. Every loop is bounded in count and in time.
"""

from __future__ import annotations

import itertools
import random
import resource
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from bench.clients import EngineWorker, Worker
from bench.progress import PhaseBar
from bench.stats import Outcome, Recorder
from bookings.spans import Span

# One herd round's slot.
HERD_SLOT = timedelta(minutes=30)

# A thread stuck this long at a barrier means another one died: give up rather than hang.
BARRIER_TIMEOUT_SECONDS = 300.0


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run target(0) … target(count - 1) on their own threads; re-raise the first exception."""
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            target(index)
        except BaseException as exc:  # re-raised in the calling thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"bench-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


# --- 1. Thundering herd ---------------------------------------------------------------------------------


@dataclass
class HerdRun:
    """Outcomes per round (one slot per round, every agent trying it at once)."""

    rounds: list[list[Outcome]]
    wall_seconds: float


def herd(
    open_worker: Callable[[int], Worker],
    *,
    agents: int,
    spans: Sequence[Span],
    time_limit: float,
    bar: PhaseBar | None = None,
) -> HerdRun:
    """Round r: all `agents` threads wait at a barrier, then each tries to reserve spans[r] once."""
    results: list[list[Outcome]] = [[] for _ in spans]
    stamps: list[float] = []
    go = threading.Event()

    def next_round() -> None:
        # Runs in one thread once all have arrived, before any is released: they all see the same `go`.
        now = time.monotonic()
        stamps.append(now)
        if len(stamps) > 1 and bar is not None:
            bar.advance()
        if len(stamps) - 1 < len(spans) and now - stamps[0] < time_limit:
            go.set()
        else:
            go.clear()

    barrier = threading.Barrier(agents, action=next_round, timeout=BARRIER_TIMEOUT_SECONDS)

    def racer(index: int) -> None:
        try:
            worker = open_worker(index)
        except BaseException:
            barrier.abort()
            raise
        try:
            for span, outcomes in zip(spans, results, strict=True):
                barrier.wait()
                if not go.is_set():
                    return
                tried = worker.reserve(0, span, commit=False)
                outcomes.extend(tried)
                if bar is not None:
                    bar.tick(len(tried))
            barrier.wait()  # the closing stamp: when the last racer of the last round finished
        except threading.BrokenBarrierError:
            return  # another racer failed; its exception is the one raised
        except BaseException:
            barrier.abort()
            raise
        finally:
            worker.close()

    run_threads(agents, racer)
    rounds_run = max(len(stamps) - 1, 0)
    wall = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    return HerdRun(rounds=results[:rounds_run], wall_seconds=wall)


# --- 2. Disjoint throughput -----------------------------------------------------------------------------


@dataclass
class TimedRun:
    recorder: Recorder
    wall_seconds: float
    # Slots handed out per calendar (for the window of the double-booking check).
    slots_used: list[int] = field(default_factory=list)


def disjoint(
    open_worker: Callable[[int], Worker],
    *,
    threads: int,
    calendars: int,
    duration: float,
    max_ops: int,
    span_for: Callable[[int], Span],
    bar: PhaseBar | None = None,
) -> TimedRun:
    """Thread i books fresh, never-overlapping slots on calendar i % calendars (hold then commit, or
    a baseline's insert) until `duration` seconds or `max_ops` operations, whichever comes first."""
    recorder = Recorder()
    counters = [itertools.count() for _ in range(calendars)]  # next() is atomic under the GIL
    start: list[float] = []
    ends: list[float] = []
    ready = threading.Barrier(threads, action=lambda: start.append(time.monotonic()))

    def booker(index: int) -> None:
        calendar = index % calendars
        try:
            worker = open_worker(index)
        except BaseException:
            ready.abort()
            raise
        try:
            ready.wait(timeout=BARRIER_TIMEOUT_SECONDS)
            deadline = start[0] + duration
            while time.monotonic() < deadline and len(recorder) < max_ops:
                outcomes = worker.reserve(calendar, span_for(next(counters[calendar])), commit=True)
                for outcome in outcomes:
                    recorder.add(outcome)
                if outcomes[-1].ok and outcomes[-1].op in ("commit", "insert"):
                    recorder.booking_done()
                if bar is not None:
                    bar.tick(len(outcomes))
        except threading.BrokenBarrierError:
            return
        finally:
            ends.append(time.monotonic())
            worker.close()

    run_threads(threads, booker)
    wall = max(ends) - start[0] if start and ends else 0.0
    return TimedRun(recorder, wall, slots_used=[next(c) for c in counters])


# --- 3. Agent-realistic mix -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MixPlan:
    calendars: int = 3
    slots: int = 96  # per calendar: where agents pick their span at random, so they collide
    think_max: float = 3.0  # seconds between hold and decision, uniform; above the TTL, holds lapse
    ttl_seconds: int = 2  # the calendars' hold_ttl_seconds
    commit_probability: float = 0.75  # otherwise the agent releases
    urgent_probability: float = 0.15
    urgent_priority: int = 500  # others use their default (100): urgent requests evict their holds
    multi_probability: float = 0.2  # hold two calendars at once (also_calendars)
    conflict_backoff: float = 0.05


@dataclass
class MixTally:
    """What became of every hold granted, seen from the agents' side (each gets exactly one decision)."""

    holds_granted: int = 0
    multi_calendar_holds: int = 0
    urgent_holds: int = 0
    committed: int = 0
    released: int = 0
    expired: int = 0
    evicted: int = 0
    failed_other: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def as_dict(self) -> dict[str, float | int | None]:
        granted = self.holds_granted
        return {
            "holds_granted": granted,
            "multi_calendar_holds": self.multi_calendar_holds,
            "urgent_holds": self.urgent_holds,
            "committed": self.committed,
            "released": self.released,
            "expired": self.expired,
            "evicted": self.evicted,
            "failed_other": self.failed_other,
            "hold_to_commit_conversion": self.committed / granted if granted else None,
            "eviction_rate": self.evicted / granted if granted else None,
            "expiry_rate": self.expired / granted if granted else None,
        }


@dataclass
class MixRun(TimedRun):
    tally: MixTally = field(default_factory=MixTally)


def mix(
    open_worker: Callable[[int], EngineWorker],
    *,
    threads: int,
    plan: MixPlan,
    duration: float,
    max_ops: int,
    span_for: Callable[[int], Span],
    seed: int,
    bar: PhaseBar | None = None,
) -> MixRun:
    """Agents hold a random slot (sometimes on two calendars, sometimes urgently), think, then commit
    or release. Holds lapse when the thinking outlasts the TTL; urgent holds evict ordinary ones."""
    recorder, tally = Recorder(), MixTally()
    start: list[float] = []
    ends: list[float] = []
    ready = threading.Barrier(threads, action=lambda: start.append(time.monotonic()))

    def agent(index: int) -> None:
        rng = random.Random(seed * 1_000 + index)
        try:
            worker = open_worker(index)
        except BaseException:
            ready.abort()
            raise
        client, calendars = worker.client, worker.calendars
        try:
            ready.wait(timeout=BARRIER_TIMEOUT_SECONDS)
            deadline = start[0] + duration
            while time.monotonic() < deadline and len(recorder) < max_ops:
                primary = rng.randrange(plan.calendars)
                also = []
                if plan.calendars > 1 and rng.random() < plan.multi_probability:
                    also = [calendars[rng.choice([c for c in range(plan.calendars) if c != primary])]]
                urgent = rng.random() < plan.urgent_probability
                held = client.hold(
                    calendars[primary],
                    span_for(rng.randrange(plan.slots)),
                    priority=plan.urgent_priority if urgent else None,
                    also=also,
                )
                recorder.add(held)
                if bar is not None:
                    bar.tick()
                if not held.ok:
                    time.sleep(rng.uniform(0, plan.conflict_backoff))
                    continue
                tally.count("holds_granted")
                if also:
                    tally.count("multi_calendar_holds")
                if urgent:
                    tally.count("urgent_holds")
                time.sleep(rng.uniform(0, plan.think_max))  # the agent thinks (or asks a human)
                if rng.random() < plan.commit_probability:
                    decided = client.commit(calendars[primary], held)
                    success = "committed"
                else:
                    decided = client.release(held)
                    success = "released"
                recorder.add(decided)
                if bar is not None:
                    bar.tick()
                if decided.ok:
                    tally.count(success)
                    if success == "committed":
                        recorder.booking_done()
                elif decided.code == "hold_expired":
                    tally.count("expired")
                elif decided.code == "hold_evicted":
                    tally.count("evicted")
                else:
                    tally.count("failed_other")
        except threading.BrokenBarrierError:
            return
        finally:
            ends.append(time.monotonic())
            worker.close()

    run_threads(threads, agent)
    wall = max(ends) - start[0] if start and ends else 0.0
    return MixRun(recorder, wall, slots_used=[plan.slots] * plan.calendars, tally=tally)


# --- 4. A runaway agent's flood ----------------------------------------------------------------------------


def flood(
    open_worker: Callable[[int], EngineWorker],
    *,
    threads: int,
    calendars: int,
    stop: threading.Event,
    time_limit: float,
    max_ops: int,
    span_for: Callable[[int], Span],
) -> TimedRun:
    """One agent's `threads` threads hold a fresh slot on calendar i % calendars and release it, as fast
    as answers come back and whatever the answers say (a runaway agent reads no Retry-After), until
    `stop` is set, `time_limit` seconds have passed or `max_ops` requests were sent."""
    recorder = Recorder()
    counters = [itertools.count() for _ in range(calendars)]
    started = time.monotonic()
    ends: list[float] = []

    def flooder(index: int) -> None:
        calendar = index % calendars
        worker = open_worker(index)
        client, calendar_id = worker.client, worker.calendars[calendar]
        try:
            while not stop.is_set() and time.monotonic() - started < time_limit and len(recorder) < max_ops:
                held = client.hold(calendar_id, span_for(next(counters[calendar])))
                recorder.add(held)
                if held.ok:
                    recorder.add(client.release(held))
        finally:
            ends.append(time.monotonic())
            worker.close()

    run_threads(threads, flooder)
    return TimedRun(recorder, max(ends, default=started) - started, slots_used=[next(c) for c in counters])


def raise_open_files_limit(wanted: int) -> None:
    """Each racer's connection is a file descriptor; raise the soft limit toward the hard one if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
