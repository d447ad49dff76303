"""The whole benchmark in one call: `run(BenchConfig(...))` returns the report (see bench.report).

Phases run one after the other, each on its own fresh calendars (or baseline calendar ids), so they
never see each other's rows: engine in-process, engine through HTTP, then the baselines, for each
scenario. Everything a phase does is bounded: herd by --rounds and a time limit, the others by
--duration and --max-ops.

Two scenarios are about scale-out, through HTTP only: `nodes` runs the disjoint workload and the herd
through 1, 2, … `--nodes` independent gunicorn masters (web nodes) at once, agent i talking to node
i mod n, and `herd500` races `--herd-racers` agents (500) for one slot per round.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import platform
import resource
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.db import connection

from bench import baselines, report
from bench.baseline_wsgi import ENV_CONNINFO, ENV_PREPARE, ENV_SCHEMA
from bench.baselines import DEFAULT_SCHEMA
from bench.clients import BaselineHttpWorker, BaselineWorker, EngineWorker, HttpSession, Worker, http_client
from bench.cost import cost_probe
from bench.history import history_probe
from bench.progress import Progress
from bench.scenarios import MixPlan, TimedRun, disjoint, herd, mix, run_threads
from bench.server import GunicornServer, default_workers
from bench.stats import ScenarioResult, latency_summary, ratio
from bench.targets import BENCH_SCOPES, LocalTarget, RemoteTarget
from bookings.spans import Span
from workspaces.keys import api_key_create, api_key_verify
from workspaces.models import Agent

IN_PROCESS, HTTP = "in-process", "http"
SCENARIOS = ("herd", "disjoint", "mix", "nodes", "herd500")
UNCONGESTED = "herd-uncongested"  # the herd with as many racers as gunicorn workers (HTTP only)
NODES_DISJOINT, NODES_HERD = "nodes-disjoint", "nodes-herd"  # the scale-out scenario's two workloads
BIG_HERD = "herd500"
HERD_SLOT = timedelta(minutes=30)
DISJOINT_SLOT = timedelta(minutes=5)
MIX_SLOT = timedelta(minutes=30)


@dataclass
class BenchConfig:
    agents: int = 50  # herd racers
    rounds: int = 20  # herd rounds, one fresh slot each
    concurrency: int = 8  # agents (threads) in disjoint, for the engine and the baselines alike
    calendars: int = 4  # K: calendars the disjoint agents spread over
    duration: float = 8.0  # seconds per timed phase (disjoint, mix)
    max_ops: int = 50_000  # cap per timed phase
    herd_time_limit: float = 60.0  # seconds per herd phase; rounds not started by then are skipped
    workers: int = field(default_factory=default_workers)  # gunicorn workers per node, as `agentcal run`
    threads: int = 1  # threads per gunicorn worker, as `agentcal run` (WEB_THREADS)
    nodes: int = 1  # nodes scenario: web nodes (gunicorn masters), measured with 1, 2, … of them
    herd_racers: int = 500  # herd500: agents racing for each slot
    herd_racers_rounds: int = 5
    herd_racers_nodes: int = 1  # herd500: web nodes the racers are spread over
    # Cost per booking: bookings made one at a time (twice: timed, then traced); 0 skips the probe.
    cost_bookings: int = 0
    modes: tuple[str, ...] = (IN_PROCESS, HTTP)
    scenarios: tuple[str, ...] = SCENARIOS
    baselines: bool = True
    key_verify_calls: int = 1000
    # History probe: hold latency on calendars with this many earlier bookings (in-process only).
    history_sizes: tuple[int, ...] = (0, 5_000, 20_000)
    history_holds: int = 40
    naive_gap_seconds: float = 0.0  # pause between the naive baseline's read and write (tests widen it)
    mix: MixPlan = field(default_factory=MixPlan)
    warmup_requests: int = 20  # per agent, before HTTP phases: every worker verifies every key once
    idempotency_keys: bool = False
    seed: int = 1
    http_timeout: float = 30.0
    baseline_schema: str = DEFAULT_SCHEMA
    # --url: benchmark a server the benchmark did not start, with these keys (HTTP engine phases only).
    url: str | None = None
    keys: tuple[str, ...] = ()
    # Tests: an AgentCal server / baseline WSGI server already running on this database (no gunicorn).
    server_url: str | None = None
    baseline_server_url: str | None = None
    # Added to the environment of every gunicorn the benchmark starts (tests: the test database's URL).
    server_env: dict[str, str] = field(default_factory=dict)
    http_headers: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    command: str = "python manage.py bench"


def conninfo_for_baselines() -> str:
    """A libpq connection string for the database Django is using right now (the test database in tests)."""
    from psycopg.conninfo import make_conninfo

    params = connection.settings_dict
    django_only = {"pool", "server_side_binding", "isolation_level", "assume_role", "prepare_threshold"}
    options = {k: v for k, v in params.get("OPTIONS", {}).items() if k not in django_only}
    given = {
        "dbname": params.get("NAME"),
        "user": params.get("USER"),
        "password": params.get("PASSWORD"),
        "host": params.get("HOST"),
        "port": str(params["PORT"]) if params.get("PORT") else None,
    }
    # OPTIONS last: the embedded server's socket directory comes as OPTIONS["host"].
    return make_conninfo(**{**{k: v for k, v in given.items() if v}, **options})


class Bench:
    def __init__(self, config: BenchConfig, progress: Progress | None = None) -> None:
        self.config = config
        self.progress = progress or Progress(enabled=False)
        self.results: list[ScenarioResult] = []
        self.base = (datetime.now(UTC) + timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)
        self._baseline_calendar_ids = itertools.count(1)
        self.app_url: str | None = None
        self.node_urls: list[str] = []  # web node 0 is app_url
        # The gunicorns this run started (web nodes, the baseline app), by URL: their CPU is read per phase.
        self._servers: dict[str, GunicornServer] = {}
        self.baseline_url: str | None = None
        self.conninfo = ""
        self.target: LocalTarget | RemoteTarget

    # --- set-up --------------------------------------------------------------------------------------

    @property
    def in_process(self) -> bool:
        return IN_PROCESS in self.config.modes and self.target.kind == "local"

    @property
    def http(self) -> bool:
        return HTTP in self.config.modes

    def run(self) -> report.Report:
        config = self.config
        started = time.monotonic()
        load_before = _load_average()
        # Read now, before anything runs: the code measured is the code imported at start.
        commit = _git_commit()
        if config.url:
            self.target = RemoteTarget(base_url=config.url, keys=config.keys, timeout=config.http_timeout)
        else:
            self.progress.note(f"creating {max(config.agents, config.concurrency)} agents and their API keys")
            self.target = LocalTarget(agents=max(config.agents, config.concurrency))
        self.conninfo = conninfo_for_baselines()
        with contextlib.ExitStack() as stack:
            if config.baselines:
                baselines.schema_create(self.conninfo, config.baseline_schema)
                stack.callback(baselines.schema_drop, self.conninfo, config.baseline_schema)
            if self.http:
                self.app_url = config.url or config.server_url or stack.enter_context(self._app_server())
                self.node_urls = [self.app_url]
                for index in range(1, self._nodes_wanted()):
                    self.node_urls.append(stack.enter_context(self._app_server(node=index)))
                if config.baselines:
                    self.baseline_url = config.baseline_server_url or stack.enter_context(
                        self._baseline_server()
                    )
                for url in self.node_urls:
                    self._warm_up(url)
            phases = {
                "herd": self._herd,
                "disjoint": self._disjoint,
                "mix": self._mix,
                "nodes": self._nodes,
                "herd500": self._big_herd,
            }
            for scenario in SCENARIOS:
                if scenario in config.scenarios:
                    phases[scenario]()
            key_verify = self._key_verify() if self.in_process and config.key_verify_calls else None
            history = self._history() if self.in_process and config.history_sizes else None
            cost = self._cost() if self.in_process and config.cost_bookings else None
        return report.build(
            results=self.results,
            key_verify=key_verify,
            history=history,
            cost=cost,
            machine={**_machine(config, load_before), "commit": commit},
            config=config,
            wall_seconds=time.monotonic() - started,
        )

    def _nodes_wanted(self) -> int:
        """Web nodes to start: only with servers of our own (with --url or a test's server there is one)."""
        config = self.config
        if config.url or config.server_url:
            return 1
        wanted = 1
        if "nodes" in config.scenarios:
            wanted = max(wanted, config.nodes)
        if BIG_HERD in config.scenarios:
            wanted = max(wanted, config.herd_racers_nodes)
        return wanted

    @contextlib.contextmanager
    def _app_server(self, *, node: int = 0) -> Iterator[str]:
        """One web node: a gunicorn master of its own, on a port of its own. Nodes share nothing but the
        database and Redis, as separate machines would."""
        self.progress.note(
            f"starting web node {node}: gunicorn agentcal.wsgi:application with {self.config.workers} workers"
        )
        server = GunicornServer(
            "agentcal.wsgi:application",
            workers=self.config.workers,
            threads=self.config.threads,
            health_path="/v1/health",
            env=self.config.server_env,
            log_dir=self.config.log_dir,
            name=f"node{node}",
        )
        with server as url:
            self._servers[url] = server
            yield url

    def _web_cpu(self, urls: Sequence[str]) -> float | None:
        """CPU seconds used so far by the gunicorns at these URLs (None unless this run started them all)."""
        servers = [self._servers.get(url) for url in urls]
        seconds = [server.cpu_seconds() if server else None for server in servers]
        return None if any(s is None for s in seconds) else sum(s for s in seconds if s is not None)

    @contextlib.contextmanager
    def _baseline_server(self) -> Iterator[str]:
        env = {
            **self.config.server_env,
            ENV_CONNINFO: self.conninfo,
            ENV_SCHEMA: self.config.baseline_schema,
            ENV_PREPARE: "1" if self.prepare_baselines else "0",
        }
        server = GunicornServer(
            "bench.baseline_wsgi:app",
            workers=self.config.workers,
            threads=self.config.threads,
            health_path="/health",
            env=env,
            log_dir=self.config.log_dir,
        )
        with server as url:
            self._servers[url] = server
            yield url

    @property
    def prepare_baselines(self) -> bool:
        """The baselines prepare their statements, except behind a transaction-mode pooler."""
        return not getattr(settings, "DB_TRANSACTION_POOLER", False)

    def _warm_up(self, url: str) -> None:
        """Not measured: each gunicorn worker pays argon2 once per key (tens of ms) on first use. Many
        concurrent requests per key make it very likely every worker has seen every key before timing."""
        agents, per_agent = self.config.agents, self.config.warmup_requests
        if per_agent <= 0:
            return
        failures: list[int] = []
        with self.progress.phase(f"warm-up (keys x workers) {url}", total=agents, unit="agents") as bar:

            def warm(index: int) -> None:
                with http_client(
                    f"{url}/v1",
                    headers={"Authorization": f"Bearer {self.target.key(index)}", **self.config.http_headers},
                    timeout=self.config.http_timeout,
                ) as client:
                    for _ in range(per_agent):
                        response = client.get("/calendars", params={"limit": 1})
                        if response.status_code != 200:
                            failures.append(response.status_code)
                        bar.tick()
                if self.baseline_url:
                    with http_client(self.baseline_url, timeout=self.config.http_timeout) as client:
                        for _ in range(3):
                            client.get("/health")
                bar.advance()

            run_threads(agents, warm)
        if failures:
            raise RuntimeError(f"warm-up requests failed ({len(failures)}, e.g. HTTP {failures[0]})")

    # --- workers ---------------------------------------------------------------------------------------

    def _engine_opener(
        self, mode: str, calendars: Sequence[str], *, nodes: int = 1
    ) -> Callable[[int], EngineWorker]:
        """Agent i's worker; through HTTP, agent i talks to web node i mod `nodes`."""
        if mode == IN_PROCESS:
            target = self.target
            assert isinstance(target, LocalTarget)
            return lambda i: EngineWorker(target.engine_session(i), calendars)
        assert self.app_url is not None
        urls = self.node_urls[:nodes] or [self.app_url]
        return lambda i: EngineWorker(
            HttpSession(
                base_url=urls[i % len(urls)],
                raw_key=self.target.key(i),
                timeout=self.config.http_timeout,
                idempotency_keys=self.config.idempotency_keys,
                headers=self.config.http_headers,
            ),
            calendars,
        )

    def _baseline_opener(
        self, variant: str, mode: str, calendar_ids: Sequence[int]
    ) -> Callable[[int], Worker]:
        if mode == HTTP:
            assert self.baseline_url is not None
            url = self.baseline_url
            return lambda i: BaselineHttpWorker(
                base_url=url,
                variant=variant,
                calendar_ids=calendar_ids,
                agent=f"agent-{i}",
                timeout=self.config.http_timeout,
            )
        gap = self.config.naive_gap_seconds if variant in ("naive", "advisory_lock") else 0.0
        return lambda i: BaselineWorker(
            baselines.BaselineStore(
                self.conninfo,
                schema=self.config.baseline_schema,
                gap_seconds=gap,
                prepare=self.prepare_baselines,
            ),
            variant=variant,
            calendar_ids=calendar_ids,
            agent=f"agent-{i}",
        )

    def _engine_modes(self) -> list[str]:
        return [
            m
            for m in (IN_PROCESS, HTTP)
            if (m == IN_PROCESS and self.in_process) or (m == HTTP and self.http)
        ]

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

    def _new_baseline_calendars(self, count: int) -> list[int]:
        return [next(self._baseline_calendar_ids) for _ in range(count)]

    # --- 1. herd ---------------------------------------------------------------------------------------

    def _herd(self) -> None:
        config = self.config
        spans = [
            Span(self.base + HERD_SLOT * r, self.base + HERD_SLOT * (r + 1)) for r in range(config.rounds)
        ]
        window = Span(self.base, self.base + HERD_SLOT * (config.rounds + 1))
        for mode in self._engine_modes():
            calendar = self.target.calendar_create(f"bench herd ({mode})")
            result = self._herd_phase("engine", mode, self._engine_opener(mode, [calendar]), spans)
            result.double_bookings = self.target.double_bookings([calendar], window)
            self.results.append(result)
        for variant, mode in self._baseline_variants("herd"):
            ids = self._new_baseline_calendars(1)
            result = self._herd_phase(variant, mode, self._baseline_opener(variant, mode, ids), spans)
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
            "engine", HTTP, self._engine_opener(HTTP, [calendar]), spans, agents=racers, scenario=UNCONGESTED
        )
        result.double_bookings = self.target.double_bookings([calendar], window)
        self.results.append(result)
        if self.config.baselines:
            ids = self._new_baseline_calendars(1)
            opener = self._baseline_opener("advisory_lock", HTTP, ids)
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
        outcomes = [o for round_outcomes in run.rounds for o in round_outcomes]
        winners = [sum(1 for o in round_outcomes if o.ok) for round_outcomes in run.rounds]
        result = ScenarioResult(scenario, variant, mode, outcomes, run.wall_seconds, double_bookings=None)
        winner_latency = result.latency(lambda o: o.ok)
        loser_latency = result.latency(lambda o: o.conflict)
        result.completed_bookings = sum(winners)
        result.extra = {
            "agents": agents,
            "rounds": len(run.rounds),
            "rounds_with_one_winner": sum(1 for w in winners if w == 1),
            "rounds_with_several_winners": sum(1 for w in winners if w > 1),
            "rounds_without_winner": sum(1 for w in winners if w == 0),
            "winner_latency_ms": winner_latency,
            "loser_latency_ms": loser_latency,
            "loser_p99_over_winner_p99": ratio(loser_latency["p99"], winner_latency["p99"]),
        }
        if variant == "engine":
            result.extra["losers_without_alternatives"] = sum(
                1 for o in outcomes if o.conflict and o.alternatives == 0
            )
        return result

    # --- 4. web nodes ----------------------------------------------------------------------------------

    def _nodes(self) -> None:
        """The disjoint workload and the herd through 1, 2, … web nodes at once (agents split between
        them): one winner per round and no double booking whichever node a racer reached, and what
        another node adds to throughput."""
        if not self.http or len(self.node_urls) < 2:
            self.progress.note("nodes: skipped (needs HTTP and servers the benchmark starts; --nodes ≥ 2)")
            return
        config = self.config

        def span_for(slot: int) -> Span:
            return Span(self.base + DISJOINT_SLOT * slot, self.base + DISJOINT_SLOT * (slot + 1))

        herd_spans = [
            Span(self.base + HERD_SLOT * r, self.base + HERD_SLOT * (r + 1)) for r in range(config.rounds)
        ]
        herd_window = Span(self.base, self.base + HERD_SLOT * (config.rounds + 1))
        for count in range(1, len(self.node_urls) + 1):
            calendars = [
                self.target.calendar_create(f"bench nodes {count} disjoint {k}", slot_minutes=5)
                for k in range(config.calendars)
            ]
            result = self._timed_phase(
                NODES_DISJOINT,
                "engine",
                HTTP,
                self._engine_opener(HTTP, calendars, nodes=count),
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
                self._engine_opener(HTTP, [calendar], nodes=count),
                herd_spans,
                scenario=NODES_HERD,
                title=f"herd · {count} web node(s)",
            )
            result.double_bookings = self.target.double_bookings([calendar], herd_window)
            result.extra.update(nodes=count, workers_per_node=config.workers)
            self.results.append(result)

    # --- 5. the big herd ---------------------------------------------------------------------------------

    def _big_herd(self) -> None:
        """`herd_racers` agents (500), one slot per round, through HTTP: each racer a thread with its own
        connection, so the process needs a file descriptor per racer (and gunicorn's listen backlog,
        2048, holds the connections its workers have not accepted yet)."""
        if not self.http:
            self.progress.note("herd500: skipped (HTTP only)")
            return
        config = self.config
        _raise_open_files_limit(2 * config.herd_racers + 256)
        # Slots after the nodes scenario's and the herd's, on a calendar of its own anyway.
        first = config.rounds + 1
        spans = [
            Span(self.base + HERD_SLOT * (first + r), self.base + HERD_SLOT * (first + r + 1))
            for r in range(config.herd_racers_rounds)
        ]
        window = Span(spans[0].start, spans[-1].end)
        nodes = min(config.herd_racers_nodes, len(self.node_urls)) or 1
        calendar = self.target.calendar_create(f"bench herd of {config.herd_racers}")
        result = self._herd_phase(
            "engine",
            HTTP,
            self._engine_opener(HTTP, [calendar], nodes=nodes),
            spans,
            agents=config.herd_racers,
            scenario=BIG_HERD,
        )
        result.double_bookings = self.target.double_bookings([calendar], window)
        result.extra.update(nodes=nodes, workers_per_node=config.workers if config.url is None else None)
        self.results.append(result)

    # --- 2. disjoint -----------------------------------------------------------------------------------

    def _disjoint(self) -> None:
        config = self.config

        def span_for(slot: int) -> Span:
            return Span(self.base + DISJOINT_SLOT * slot, self.base + DISJOINT_SLOT * (slot + 1))

        for mode in self._engine_modes():
            calendars = [
                self.target.calendar_create(f"bench disjoint {k} ({mode})", slot_minutes=5)
                for k in range(config.calendars)
            ]
            result = self._timed_phase(
                "disjoint", "engine", mode, self._engine_opener(mode, calendars), span_for
            )
            window = Span(self.base, span_for(max(result.extra.pop("slots_used"), default=0) + 1).end)
            result.double_bookings = self.target.double_bookings(calendars, window)
            self.results.append(result)
        for variant, mode in self._baseline_variants("disjoint"):
            ids = self._new_baseline_calendars(config.calendars)
            result = self._timed_phase(
                "disjoint", variant, mode, self._baseline_opener(variant, mode, ids), span_for
            )
            result.extra.pop("slots_used")
            result.double_bookings = baselines.overlapping_pairs(
                self.conninfo, variant, ids, self.config.baseline_schema
            )
            self.results.append(result)

    def _timed_phase(
        self,
        scenario: str,
        variant: str,
        mode: str,
        open_worker: Callable[[int], Worker],
        span_for: Callable[[int], Span],
        *,
        title: str | None = None,
        nodes: int = 1,
    ) -> ScenarioResult:
        config = self.config
        title = title or f"{scenario} · {variant} · {mode}"
        web: list[str] = []
        if mode == HTTP:
            baseline = [self.baseline_url] if self.baseline_url else []
            web = self.node_urls[:nodes] if variant == "engine" else baseline
        web_cpu_before = self._web_cpu(web) if web else None
        # In-process and psycopg phases do all their client-side work in this process, so its CPU time
        # (every thread's) is what a write costs outside PostgreSQL.
        process_cpu_before = time.process_time()
        with self.progress.phase(title, total=config.duration, unit="s") as bar:
            run: TimedRun = disjoint(
                open_worker,
                threads=config.concurrency,
                calendars=config.calendars,
                duration=config.duration,
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
        web_cpu_after = self._web_cpu(web) if web else None
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
        for mode in self._engine_modes():
            calendars = [
                self.target.calendar_create(f"bench mix {k} ({mode})", hold_ttl_seconds=plan.ttl_seconds)
                for k in range(plan.calendars)
            ]
            with self.progress.phase(f"mix · engine · {mode}", total=config.duration, unit="s") as bar:
                run = mix(
                    self._engine_opener(mode, calendars),
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

    # --- history probe -------------------------------------------------------------------------------

    def _history(self) -> list[dict[str, Any]]:
        assert isinstance(self.target, LocalTarget)
        return history_probe(
            self.target,
            sizes=self.config.history_sizes,
            base=self.base,
            holds=self.config.history_holds,
            progress=self.progress,
        )

    # --- cost per booking, ceiling of one calendar ------------------------------------------------------

    def _cost(self) -> dict[str, Any]:
        assert isinstance(self.target, LocalTarget)
        config = self.config
        return cost_probe(
            self.target,
            bookings=config.cost_bookings,
            # Far after every other phase's slots (the probe's calendars are its own anyway).
            base=self.base + timedelta(days=400),
            threads=config.concurrency,
            duration=config.duration,
            max_ops=config.max_ops,
            progress=self.progress,
        )

    # --- API key verification --------------------------------------------------------------------------

    def _key_verify(self) -> dict[str, Any]:
        """In-process: the first call pays argon2, later ones the cached HMAC plus the key-row read."""
        target = self.target
        assert isinstance(target, LocalTarget)
        agent = Agent.objects.get(pk=target.agent_pks[0])
        _key, raw = api_key_create(agent=agent, scopes=list(BENCH_SCOPES))
        started = time.perf_counter()
        api_key_verify(raw)
        first = time.perf_counter() - started
        samples = []
        with self.progress.phase(
            "api key verification", total=self.config.key_verify_calls, unit="calls"
        ) as bar:
            for _ in range(self.config.key_verify_calls):
                started = time.perf_counter()
                api_key_verify(raw)
                samples.append(time.perf_counter() - started)
                bar.advance()
        return {
            "calls_after_first": len(samples),
            "first_call_ms": first * 1000,
            "latency_ms": latency_summary(samples),
            "argon2": {
                "time_cost": settings.ARGON2_TIME_COST,
                "memory_cost_kib": settings.ARGON2_MEMORY_COST_KIB,
                "parallelism": settings.ARGON2_PARALLELISM,
            },
        }


def _git_commit() -> str | None:
    """The checked-out commit, when this is a git work tree (not a published contract: for the report)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _raise_open_files_limit(wanted: int) -> None:
    """Each racer's connection is a file descriptor; raise the soft limit toward the hard one if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _machine(config: BenchConfig, load_before: list[float] | None) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        postgres = str(cursor.fetchone()[0])
    if config.url:
        database = f"server at {config.url} (its own database); baselines on this process's database"
    elif getattr(settings, "USING_EMBEDDED_POSTGRES", False):
        database = "embedded PostgreSQL (pgserver), AGENTCAL_DATA_DIR"
    else:
        database = "DATABASE_URL"
    pooler = bool(getattr(settings, "DB_TRANSACTION_POOLER", False))
    if pooler:
        database += ", through a transaction-mode pooler (DB_TRANSACTION_POOLER)"
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "gunicorn": version("gunicorn"),
        "psycopg": version("psycopg"),
        "postgresql": postgres,
        "database": database,
        "transaction_pooler": pooler,
        "gunicorn_workers": config.workers if config.url is None and config.server_url is None else None,
        "load_average_before": load_before,
        "load_average_after": _load_average(),
    }


def run(config: BenchConfig, *, progress: Progress | None = None) -> report.Report:
    return Bench(config, progress).run()
