"""The runaway scenario: does one agent flooding the API cost the well-behaved agents, and what does the
per-agent request-rate check cost a request when nobody floods?

Through HTTP only, on gunicorns of its own (the switch AGENT_RATE_LIMITS_ENABLED is set in their
environment), the runaway agent's limits set in this run's database. For each kind of web worker in
`runaway_worker_threads` (1 thread: sync workers; more: gthread): the well-behaved agents
(--concurrency, the disjoint workload) alone, then beside the flood — one agent holding and releasing
from `runaway_flood_threads` threads on calendars of its own. On the first kind, the run alone is split
in halves around two halves on a server with the check off (on, off, off, on), so drift in the machine's
load falls on both sides of the on/off ratio alike.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from bench.config import HTTP, RUNAWAY_CALM, RUNAWAY_FLOOD, RUNAWAY_LIMITS_OFF
from bench.scenarios import TimedRun, flood
from bench.stats import Recorder, ScenarioResult
from bench.targets import GENEROUS_LIMITS, LocalTarget
from bookings.spans import Span

if TYPE_CHECKING:
    from bench.phases import Phases

SLOT = timedelta(minutes=5)
RATE_CHECK_SWITCH = "AGENT_RATE_LIMITS_ENABLED"
FLOOD_VARIANT = "flood"
# The flood stops when the well-behaved run ends; this bounds it should that run never end.
FLOOD_TIME_SLACK_SECONDS = 5.0


def runaway(phases: Phases) -> None:
    config, target, deployment = phases.config, phases.target, phases.deployment
    if not phases.http or not isinstance(target, LocalTarget) or not deployment.starts_servers:
        phases.progress.note(
            "runaway: skipped (HTTP only, on servers this run starts: it sets the runaway agent's limits in "
            "this database and the rate check's switch in the servers' environment)"
        )
        return
    # The well-behaved agents keep the workspace's limits (bench.targets.GENEROUS_LIMITS). Set before the
    # scenario's servers start, so each of their processes reads the flooding agent's limits fresh.
    flood_limits = {
        "requests_per_second": config.runaway_flood_rate,
        "request_burst": config.runaway_flood_burst,
    }
    target.agent_limits_set(config.runaway_agent, flood_limits)
    context = {
        "flood_threads": config.runaway_flood_threads,
        "flood_limits": flood_limits,
        "well_behaved_limits": GENEROUS_LIMITS.as_dict(),
    }
    # The runaway agent is not warmed up: that would spend its own budget. Its first request on each web
    # worker pays argon2 (tens of ms), as a freshly started agent's does, mostly before the others start.
    well_behaved = list(range(config.concurrency))
    for position, threads in enumerate(config.runaway_worker_threads):
        with contextlib.ExitStack() as servers:
            url = servers.enter_context(
                deployment.app_server(f"runaway-{threads}t", threads=threads, env={RATE_CHECK_SWITCH: "true"})
            )
            deployment.warm_up(url, well_behaved)
            run = Runaway(phases, url=url, threads=threads, context=context)
            if position == 0:
                off_url = servers.enter_context(
                    deployment.app_server(
                        "runaway-check-off", threads=threads, env={RATE_CHECK_SWITCH: "false"}
                    )
                )
                deployment.warm_up(off_url, well_behaved)
                phases.results += run.alone_against_check_off(off_url)
            else:
                phases.results.append(run.alone(RUNAWAY_CALM, url, duration=config.duration))
            phases.results += run.beside_flood()


class Runaway:
    """The phases on one kind of web worker, each on calendars of its own."""

    def __init__(self, phases: Phases, *, url: str, threads: int, context: dict[str, object]) -> None:
        self.phases = phases
        self.config = phases.config
        self.url = url
        self.extra = {"worker_threads": threads, **context}

    def span_for(self, slot: int) -> Span:
        base = self.phases.base
        return Span(base + SLOT * slot, base + SLOT * (slot + 1))

    def _calendars(self, label: str) -> list[str]:
        return [
            self.phases.target.calendar_create(f"bench {label} {k}", slot_minutes=5)
            for k in range(self.config.calendars)
        ]

    def _well_behaved(
        self,
        scenario: str,
        url: str,
        calendars: list[str],
        *,
        duration: float,
        title: str,
        rate_check: bool = True,
    ) -> ScenarioResult:
        """The disjoint workload through the server at `url`; only HTTP in this thread, no database."""
        result = self.phases.timed_phase(
            scenario,
            "engine",
            HTTP,
            self.phases.engine_opener(HTTP, calendars, url=url),
            self.span_for,
            title=title,
            url=url,
            duration=duration,
        )
        result.extra.update(self.extra, rate_check=rate_check)
        return result

    def _checked(self, result: ScenarioResult, calendars: list[str], slots_used: list[int]) -> ScenarioResult:
        result.double_bookings = self.phases.target.double_bookings(calendars, self._window(slots_used))
        return result

    def _window(self, slots_used: list[int]) -> Span:
        return Span(self.phases.base, self.span_for(max(slots_used, default=0) + 1).end)

    def alone(self, scenario: str, url: str, *, duration: float, rate_check: bool = True) -> ScenarioResult:
        check = "on" if rate_check else "off"
        title = f"{scenario} · {self.extra['worker_threads']} thread(s) · check {check}"
        calendars = self._calendars(title)
        result = self._well_behaved(
            scenario, url, calendars, duration=duration, title=title, rate_check=rate_check
        )
        return self._checked(result, calendars, result.extra.pop("slots_used"))

    def alone_against_check_off(self, off_url: str) -> list[ScenarioResult]:
        """On, off, off, on, each half the duration: the halves of each side are added up."""
        half = self.config.duration / 2
        first_on = self.alone(RUNAWAY_CALM, self.url, duration=half)
        offs = [self.alone(RUNAWAY_LIMITS_OFF, off_url, duration=half, rate_check=False) for _ in range(2)]
        last_on = self.alone(RUNAWAY_CALM, self.url, duration=half)
        return [merged([first_on, last_on]), merged(offs)]

    def beside_flood(self) -> list[ScenarioResult]:
        """The well-behaved agents and the flood at once; the flood starts first and stops with them."""
        config = self.config
        title = f"{RUNAWAY_FLOOD} · {self.extra['worker_threads']} thread(s)"
        calendars, flood_calendars = self._calendars(title), self._calendars(f"{title} · flood")
        # The flood runs in a process of its own: as threads of this one it would take the well-behaved
        # clients' share of this process's interpreter lock, and their latency would measure the client.
        context = multiprocessing.get_context("fork")
        stop = context.Event()
        receiving, sending = context.Pipe(duplex=False)
        flooder = context.Process(
            target=_flood_in_child,
            args=(sending, stop),
            kwargs={
                "open_worker": self.phases.engine_opener(
                    HTTP, flood_calendars, url=self.url, as_agent=config.runaway_agent
                ),
                "threads": config.runaway_flood_threads,
                "calendars": config.calendars,
                "time_limit": config.duration + FLOOD_TIME_SLACK_SECONDS,
                "max_ops": config.max_ops,
                "span_for": self.span_for,
            },
            name="bench-flood",
        )
        flooder.start()
        sending.close()
        try:
            well_behaved = self._well_behaved(
                RUNAWAY_FLOOD, self.url, calendars, duration=config.duration, title=title
            )
        finally:
            stop.set()
        outcomes, wall_seconds, slots_used = receiving.recv()
        flooder.join()
        run = TimedRun(Recorder(outcomes=outcomes), wall_seconds, slots_used=slots_used)
        self._checked(well_behaved, calendars, well_behaved.extra.pop("slots_used"))
        flooded = ScenarioResult(
            RUNAWAY_FLOOD,
            FLOOD_VARIANT,
            HTTP,
            run.recorder.outcomes,
            run.wall_seconds,
            double_bookings=None,
        )
        self._checked(flooded, flood_calendars, run.slots_used)
        flooded.extra = {**self.extra, "rate_check": True, "threads": config.runaway_flood_threads}
        return [well_behaved, flooded]


def _flood_in_child(sending: Connection, stop: Any, **flood_options: Any) -> None:
    """The flood, in the forked process: HTTP only (nothing of the parent's database connections or
    threads is used), its outcomes sent back whole; then out without the parent's exit handlers."""
    try:
        run = flood(stop=stop, **flood_options)
        sending.send((run.recorder.outcomes, run.wall_seconds, run.slots_used))
    finally:
        sending.close()
        os._exit(0)


def merged(parts: list[ScenarioResult]) -> ScenarioResult:
    """One row of several runs of the same phase: their outcomes and wall times added up."""
    first = parts[0]
    counts = [part.double_bookings for part in parts]
    result = ScenarioResult(
        first.scenario,
        first.variant,
        first.mode,
        [outcome for part in parts for outcome in part.outcomes],
        sum(part.wall_seconds for part in parts),
        double_bookings=None if None in counts else sum(c or 0 for c in counts),
        completed_bookings=sum(part.completed_bookings for part in parts),
    )
    result.extra = {**first.extra, "runs": len(parts)}
    cpu = [part.extra.get("web_cpu_ms_per_write") for part in parts]
    if result.attempts and all(c is not None for c in cpu):
        spent = sum((c or 0.0) * part.attempts for c, part in zip(cpu, parts, strict=True))
        result.extra["web_cpu_ms_per_write"] = spent / result.attempts
    return result
