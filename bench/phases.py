"""Each scenario's phases, the engine's then the baselines', each on fresh calendars of its own.

A phase drives one workload (bench.scenarios) through one kind of worker (bench.clients): the engine
in-process or through HTTP, a baseline through psycopg or its WSGI app, and turns what the workers saw
into a `ScenarioResult`, double bookings counted in the database afterwards.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from bench import baselines
from bench.big_herd import big_herd
from bench.clients import BaselineHttpWorker, BaselineWorker, EngineWorker, HttpSession, Worker
from bench.config import HTTP, IN_PROCESS, NODES_DISJOINT, NODES_HERD, UNCONGESTED, BenchConfig
from bench.deployment import Deployment, prepare_baselines
from bench.meeting import meeting_results
from bench.progress import Progress
from bench.runaway import runaway
from bench.scenarios import HERD_SLOT, TimedRun, disjoint, herd, mix
from bench.search_probe import search_probe
from bench.stats import ScenarioResult, herd_result
from bench.targets import LocalTarget, RemoteTarget
from bookings.spans import Span

DISJOINT_SLOT = timedelta(minutes=5)
MIX_SLOT = timedelta(minutes=30)


class Phases:
    def __init__(
        self,
        config: BenchConfig,
        *,
        target: LocalTarget | RemoteTarget,
        deployment: Deployment,
        conninfo: str,
        base: datetime,
        progress: Progress,
    ) -> None:
        self.config = config
        self.target = target
        self.deployment = deployment
        self.conninfo = conninfo
        self.base = base  # every slot is an offset from here, two days ahead
        self.progress = progress
        self.results: list[ScenarioResult] = []
        # The starting code's big herd, raced in turn with the engine's (bench/big_herd.py), or why not.
        self.starting_code: dict[str, Any] | None = None
        self.http = HTTP in config.modes
        # In-process needs the database here: with --url the engine is only reachable through HTTP.
        in_process = IN_PROCESS in config.modes and target.kind == "local"
        self.engine_modes = [mode for mode, wanted in ((IN_PROCESS, in_process), (HTTP, self.http)) if wanted]
        self._baseline_calendar_ids = itertools.count(1)

    def run(self, scenario: str) -> None:
        {
            "herd": self._herd,
            "disjoint": self._disjoint,
            "mix": self._mix,
            "nodes": self._nodes,
            "herd500": lambda: big_herd(self),
            "meeting": self._meeting,
            "runaway": lambda: runaway(self),
        }[scenario]()

    # --- workers ---------------------------------------------------------------------------------------

    def engine_opener(
        self,
        mode: str,
        calendars: Sequence[str],
        *,
        nodes: int = 1,
        url: str | None = None,
        as_agent: int | None = None,
        lean: bool = False,
    ) -> Callable[[int], EngineWorker]:
        """Agent i's worker; through HTTP, agent i talks to web node i mod `nodes` (or to the server at
        `url`). With `as_agent`, every thread speaks as that one agent; with `lean`, through
        bench/lean_http.py instead of httpx."""
        if mode == IN_PROCESS:
            target = self.target
            assert isinstance(target, LocalTarget)
            return lambda i: EngineWorker(
                target.engine_session(i if as_agent is None else as_agent), calendars
            )
        assert self.deployment.app_url is not None
        urls = [url] if url else self.deployment.node_urls[:nodes] or [self.deployment.app_url]
        return lambda i: EngineWorker(
            HttpSession(
                base_url=urls[i % len(urls)],
                raw_key=self.target.key(i if as_agent is None else as_agent),
                timeout=self.config.http_timeout,
                idempotency_keys=self.config.idempotency_keys,
                headers=self.config.http_headers,
                lean=lean,
            ),
            calendars,
        )

    def baseline_opener(
        self, variant: str, mode: str, calendar_ids: Sequence[int], *, lean: bool = False
    ) -> Callable[[int], Worker]:
        if mode == HTTP:
            assert self.deployment.baseline_url is not None
            url = self.deployment.baseline_url
            return lambda i: BaselineHttpWorker(
                base_url=url,
                variant=variant,
                calendar_ids=calendar_ids,
                agent=f"agent-{i}",
                timeout=self.config.http_timeout,
                lean=lean,
            )
        gap = self.config.naive_gap_seconds if variant in ("naive", "advisory_lock") else 0.0
        return lambda i: BaselineWorker(
            baselines.BaselineStore(
                self.conninfo,
                schema=self.config.baseline_schema,
                gap_seconds=gap,
                prepare=prepare_baselines(),
            ),
            variant=variant,
            calendar_ids=calendar_ids,
            agent=f"agent-{i}",
        )

    def _baseline_variants(self, scenario: str) -> list[tuple[str, str]]:
        if not self.config.baselines:
            return []
        chosen = [("naive", "psycopg"), ("advisory_lock", "psycopg")]
        if self.http:
            chosen.append(("advisory_lock", HTTP))
        if scenario == "disjoint":
            chosen.append(("raw_insert", "psycopg"))  # a race-free insert needs no herd to prove anything
            chosen.append(("guarded", "psycopg"))  # the engine's own rows and constraints, minus Django
        return chosen

    def new_baseline_calendars(self, count: int) -> list[int]:
        return [next(self._baseline_calendar_ids) for _ in range(count)]

    # --- 1. herd ---------------------------------------------------------------------------------------

    def _herd(self) -> None:
        config = self.config
        spans = [
            Span(self.base + HERD_SLOT * r, self.base + HERD_SLOT * (r + 1)) for r in range(config.rounds)
        ]
        window = Span(self.base, self.base + HERD_SLOT * (config.rounds + 1))
        for mode in self.engine_modes:
            calendar = self.target.calendar_create(f"bench herd ({mode})")
            result = self._herd_phase("engine", mode, self.engine_opener(mode, [calendar]), spans)
            result.double_bookings = self.target.double_bookings([calendar], window)
            self.results.append(result)
        for variant, mode in self._baseline_variants("herd"):
            ids = self.new_baseline_calendars(1)
            result = self._herd_phase(variant, mode, self.baseline_opener(variant, mode, ids), spans)
            result.double_bookings = baselines.overlapping_pairs(
                self.conninfo, variant, ids, self.config.baseline_schema
            )
            self.results.append(result)
        # Only with a server of our own: with --url the number of the server's workers is unknown.
        if self.http and config.url is None and config.workers < config.agents:
            self._herd_uncongested(spans, window)

    def _herd_uncongested(self, spans: list[Span], window: Span) -> None:
        """The herd again through HTTP with as many racers as gunicorn workers: no request waits for a
        free worker, so the loser/winner ratio compares the two code paths rather than places in a queue
        (with 50 racers on 5 workers, the 45th request to be served waits for ~9 others, win or lose)."""
        racers = self.config.workers
        calendar = self.target.calendar_create("bench herd (http, uncongested)")
        result = self._herd_phase(
            "engine", HTTP, self.engine_opener(HTTP, [calendar]), spans, agents=racers, scenario=UNCONGESTED
        )
        result.double_bookings = self.target.double_bookings([calendar], window)
        self.results.append(result)
        if self.config.baselines:
            ids = self.new_baseline_calendars(1)
            opener = self.baseline_opener("advisory_lock", HTTP, ids)
            result = self._herd_phase(
                "advisory_lock", HTTP, opener, spans, agents=racers, scenario=UNCONGESTED
            )
            result.double_bookings = baselines.overlapping_pairs(
                self.conninfo, "advisory_lock", ids, self.config.baseline_schema
            )
            self.results.append(result)

    def _herd_phase(
        self,
        variant: str,
        mode: str,
        open_worker: Callable[[int], Worker],
        spans: list[Span],
        *,
        agents: int | None = None,
        scenario: str = "herd",
        title: str | None = None,
    ) -> ScenarioResult:
        config = self.config
        agents = agents or config.agents
        title = title or f"{scenario} · {variant} · {mode}"
        with self.progress.phase(title, total=len(spans), unit="rounds") as bar:
            run = herd(open_worker, agents=agents, spans=spans, time_limit=config.herd_time_limit, bar=bar)
        return herd_result(
            variant,
            mode,
            run.rounds,
            run.wall_seconds,
            agents=agents,
            scenario=scenario,
            answers_alternatives=variant == "engine",
        )

    # --- 4. web nodes ----------------------------------------------------------------------------------

    def _nodes(self) -> None:
        """The disjoint workload and the herd through 1, 2, … web nodes at once (agents split between
        them): one winner per round and no double booking whichever node a racer reached, and what
        another node adds to throughput."""
        if not self.http or len(self.deployment.node_urls) < 2:
            self.progress.note("nodes: skipped (needs HTTP and servers the benchmark starts; --nodes ≥ 2)")
            return
        config = self.config

        def span_for(slot: int) -> Span:
            return Span(self.base + DISJOINT_SLOT * slot, self.base + DISJOINT_SLOT * (slot + 1))

        herd_spans = [
            Span(self.base + HERD_SLOT * r, self.base + HERD_SLOT * (r + 1)) for r in range(config.rounds)
        ]
        herd_window = Span(self.base, self.base + HERD_SLOT * (config.rounds + 1))
        for count in range(1, len(self.deployment.node_urls) + 1):
            calendars = [
                self.target.calendar_create(f"bench nodes {count} disjoint {k}", slot_minutes=5)
                for k in range(config.calendars)
            ]
            result = self.timed_phase(
                NODES_DISJOINT,
                "engine",
                HTTP,
                self.engine_opener(HTTP, calendars, nodes=count),
                span_for,
                title=f"disjoint · {count} web node(s)",
                nodes=count,
            )
            window = Span(self.base, span_for(max(result.extra.pop("slots_used"), default=0) + 1).end)
            result.double_bookings = self.target.double_bookings(calendars, window)
            result.extra.update(nodes=count, workers_per_node=config.workers)
            self.results.append(result)
            calendar = self.target.calendar_create(f"bench nodes {count} herd")
            result = self._herd_phase(
                "engine",
                HTTP,
                self.engine_opener(HTTP, [calendar], nodes=count),
                herd_spans,
                scenario=NODES_HERD,
                title=f"herd · {count} web node(s)",
            )
            result.double_bookings = self.target.double_bookings([calendar], herd_window)
            result.extra.update(nodes=count, workers_per_node=config.workers)
            self.results.append(result)

    # --- 2. disjoint -----------------------------------------------------------------------------------

    def _disjoint(self) -> None:
        config = self.config

        def span_for(slot: int) -> Span:
            return Span(self.base + DISJOINT_SLOT * slot, self.base + DISJOINT_SLOT * (slot + 1))

        for mode in self.engine_modes:
            calendars = [
                self.target.calendar_create(f"bench disjoint {k} ({mode})", slot_minutes=5)
                for k in range(config.calendars)
            ]
            result = self.timed_phase(
                "disjoint", "engine", mode, self.engine_opener(mode, calendars), span_for
            )
            window = Span(self.base, span_for(max(result.extra.pop("slots_used"), default=0) + 1).end)
            result.double_bookings = self.target.double_bookings(calendars, window)
            self.results.append(result)
        for variant, mode in self._baseline_variants("disjoint"):
            ids = self.new_baseline_calendars(config.calendars)
            result = self.timed_phase(
                "disjoint", variant, mode, self.baseline_opener(variant, mode, ids), span_for
            )
            result.extra.pop("slots_used")
            result.double_bookings = baselines.overlapping_pairs(
                self.conninfo, variant, ids, self.config.baseline_schema
            )
            self.results.append(result)

    def timed_phase(
        self,
        scenario: str,
        variant: str,
        mode: str,
        open_worker: Callable[[int], Worker],
        span_for: Callable[[int], Span],
        *,
        title: str | None = None,
        nodes: int = 1,
        url: str | None = None,
        duration: float | None = None,
    ) -> ScenarioResult:
        """The disjoint workload through these workers for `duration` (else --duration) seconds; `url`:
        the engine's server when it is not the run's web nodes (for the web CPU per write)."""
        config = self.config
        duration = duration or config.duration
        title = title or f"{scenario} · {variant} · {mode}"
        web: list[str] = []
        if mode == HTTP:
            baseline = [self.deployment.baseline_url] if self.deployment.baseline_url else []
            engine = [url] if url else self.deployment.node_urls[:nodes]
            web = engine if variant == "engine" else baseline
        web_cpu_before = self.deployment.web_cpu(web) if web else None
        # In-process and psycopg phases do all their client-side work in this process, so its CPU time
        # (every thread's) is what a write costs outside PostgreSQL.
        process_cpu_before = time.process_time()
        with self.progress.phase(title, total=duration, unit="s") as bar:
            run: TimedRun = disjoint(
                open_worker,
                threads=config.concurrency,
                calendars=config.calendars,
                duration=duration,
                max_ops=config.max_ops,
                span_for=span_for,
                bar=bar,
            )
        process_cpu = time.process_time() - process_cpu_before
        result = ScenarioResult(
            scenario,
            variant,
            mode,
            run.recorder.outcomes,
            run.wall_seconds,
            double_bookings=None,
            completed_bookings=run.recorder.completed_bookings,
        )
        result.extra = {
            "threads": config.concurrency,
            "calendars": config.calendars,
            "slots_used": run.slots_used,
        }
        web_cpu_after = self.deployment.web_cpu(web) if web else None
        if web_cpu_before is not None and web_cpu_after is not None and result.attempts:
            # What the web workers spent per write: Django, DRF, the key check and the engine's Python
            # (for the baseline app, its few lines of WSGI and psycopg).
            result.extra["web_cpu_ms_per_write"] = 1000 * (web_cpu_after - web_cpu_before) / result.attempts
        if mode != HTTP and result.attempts:
            result.extra["process_cpu_ms_per_write"] = 1000 * process_cpu / result.attempts
        return result

    # --- 3. mix ------------------------------------------------------------------------------------------

    def _mix(self) -> None:
        config, plan = self.config, self.config.mix

        def span_for(slot: int) -> Span:
            return Span(self.base + MIX_SLOT * slot, self.base + MIX_SLOT * (slot + 1))

        window = Span(self.base, span_for(plan.slots).end)
        for mode in self.engine_modes:
            calendars = [
                self.target.calendar_create(f"bench mix {k} ({mode})", hold_ttl_seconds=plan.ttl_seconds)
                for k in range(plan.calendars)
            ]
            with self.progress.phase(f"mix · engine · {mode}", total=config.duration, unit="s") as bar:
                run = mix(
                    self.engine_opener(mode, calendars),
                    threads=config.agents,
                    plan=plan,
                    duration=config.duration,
                    max_ops=config.max_ops,
                    span_for=span_for,
                    seed=config.seed,
                    bar=bar,
                )
            result = ScenarioResult(
                "mix",
                "engine",
                mode,
                run.recorder.outcomes,
                run.wall_seconds,
                double_bookings=self.target.double_bookings(calendars, window),
                completed_bookings=run.recorder.completed_bookings,
            )
            result.extra = {
                "threads": config.agents,
                "calendars": plan.calendars,
                "hold_ttl_seconds": plan.ttl_seconds,
                "think_max_seconds": plan.think_max,
                **run.tally.as_dict(),
                "hold_latency_ms": result.latency(lambda o: o.op == "hold"),
                "commit_latency_ms": result.latency(lambda o: o.op == "commit"),
            }
            if isinstance(self.target, LocalTarget):
                result.extra["final_states"] = self.target.status_counts(calendars)
            self.results.append(result)

    # --- 6. a meeting across zones ------------------------------------------------------------------------

    def _meeting(self) -> None:
        """Both strategies through HTTP on a server of our own (the data set is planted in its database),
        then the search alone, in-process."""
        config = self.config
        if not isinstance(self.target, LocalTarget):
            self.progress.note("meeting: skipped (plants busy time in the database; not with --url)")
            return
        if self.http:
            assert self.deployment.app_url is not None
            self.results += meeting_results(
                target=self.target,
                base_url=self.deployment.app_url,
                agents=config.meeting_agents,
                tries=config.meeting_tries,
                seed=config.seed,
                progress=self.progress,
                timeout=config.http_timeout,
                headers=config.http_headers,
            )
        if IN_PROCESS in self.engine_modes and config.meeting_search_calls:
            self.results.append(
                search_probe(
                    self.target, calls=config.meeting_search_calls, seed=config.seed, progress=self.progress
                )
            )
