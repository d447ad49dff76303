"""The big herd (`herd500`): `herd_racers` agents (500) race for one slot per round through HTTP, and
the same racers race (b) and the code the request path's cuts started from (bench/starting_code.py),
each round in turn, with the CPU each one's rounds cost the web workers, the racers' client and
PostgreSQL: where a round's time went, on cores all of them share."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench import baselines
from bench.clients import EngineWorker, HttpSession, Worker
from bench.config import BIG_HERD, HTTP
from bench.deployment import Deployment
from bench.scenarios import HERD_SLOT, herd, raise_open_files_limit
from bench.server import machine_busy_seconds
from bench.starting_code import STARTING_COMMIT, NotRaced, starting_code
from bench.stats import Outcome, ScenarioResult, herd_result
from bookings.spans import Span

if TYPE_CHECKING:
    from bench.phases import Phases

STARTING_CODE = "starting_code"


@dataclass
class _Contender:
    """One side of the big herd: the racers' workers, the servers they reach, its double-booking count."""

    variant: str
    open_worker: Callable[[int], Worker]
    servers: Sequence[str]
    double_bookings: Callable[[], int | None]
    nodes: int = 1


@dataclass
class _CpuReading:
    web: float | None
    database: float | None
    client: float
    machine: tuple[float, float] | None

    @classmethod
    def now(cls, deployment: Deployment, servers: Sequence[str]) -> _CpuReading:
        return cls(
            deployment.web_cpu(servers),
            deployment.database_cpu(),
            time.process_time(),
            machine_busy_seconds(),
        )


@dataclass
class _CpuSpent:
    """CPU seconds a contender's rounds cost, summed over its rounds (None once a reading was missing)."""

    web: float | None = 0.0
    database: float | None = 0.0
    client: float = 0.0
    busy: float | None = 0.0
    elapsed: float | None = 0.0

    def add(self, before: _CpuReading, after: _CpuReading) -> None:
        self.client += after.client - before.client
        self.web = _plus(self.web, before.web, after.web)
        self.database = _plus(self.database, before.database, after.database)
        if before.machine is None or after.machine is None:
            self.busy = self.elapsed = None
        else:
            self.busy = _plus(self.busy, before.machine[0], after.machine[0])
            self.elapsed = _plus(self.elapsed, before.machine[1], after.machine[1])

    def per_attempt(self, attempts: int) -> dict[str, float]:
        """The report's figures: ms per attempt of each, and the cores' busy share through the rounds."""
        if not attempts:
            return {}
        figures = {"client_cpu_ms_per_attempt": 1000 * self.client / attempts}
        if self.web is not None:
            figures["web_cpu_ms_per_attempt"] = 1000 * self.web / attempts
        if self.database is not None:
            figures["database_cpu_ms_per_attempt"] = 1000 * self.database / attempts
        if self.busy is not None and self.elapsed:
            figures["machine_busy_share"] = self.busy / self.elapsed
        return figures


def _plus(total: float | None, before: float | None, after: float | None) -> float | None:
    return None if total is None or before is None or after is None else total + after - before


def big_herd(phases: Phases) -> None:
    """`herd_racers` agents (500), one slot per round, through HTTP: each racer a thread with its own
    connection (bench/lean_http.py), so the process needs a file descriptor per racer (and gunicorn's
    listen backlog, 2048, holds the connections its workers have not accepted yet). The same racers
    race (b) through HTTP, the floor of a round on the same cores, and the code the request path's cuts
    started from, the yardstick of the big herd's goal: round by round in turn with the engine, so a
    slower minute of a shared machine falls on each of them."""
    if not phases.http:
        phases.progress.note("herd500: skipped (HTTP only)")
        return
    config = phases.config
    raise_open_files_limit(2 * config.herd_racers + 256)
    # Slots after the nodes scenario's and the herd's, on a calendar of its own anyway.
    first = config.rounds + 1
    spans = [
        Span(phases.base + HERD_SLOT * (first + r), phases.base + HERD_SLOT * (first + r + 1))
        for r in range(config.herd_racers_rounds)
    ]
    window = Span(spans[0].start, spans[-1].end)
    nodes = min(config.herd_racers_nodes, len(phases.deployment.node_urls)) or 1
    name = f"bench herd of {config.herd_racers}"
    calendar = phases.target.calendar_create(name)
    contenders = [
        _Contender(
            "engine",
            phases.engine_opener(HTTP, [calendar], nodes=nodes, lean=True),
            phases.deployment.node_urls[:nodes],
            lambda: phases.target.double_bookings([calendar], window),
            nodes,
        )
    ]
    if config.baselines and phases.deployment.baseline_url is not None:
        ids = phases.new_baseline_calendars(1)
        contenders.append(
            _Contender(
                "advisory_lock",
                phases.baseline_opener("advisory_lock", HTTP, ids, lean=True),
                [phases.deployment.baseline_url],
                lambda: baselines.overlapping_pairs(
                    phases.conninfo, "advisory_lock", ids, config.baseline_schema
                ),
            )
        )
    with contextlib.ExitStack() as stack:
        if config.starting_code and phases.deployment.starts_servers:
            contenders += _starting_code_contender(phases, stack, name)
        raced = _interleaved(phases, contenders, spans)
        # While the starting code's database is still there.
        for contender, result in zip(contenders, raced, strict=True):
            result.double_bookings = contender.double_bookings()
    for contender, result in zip(contenders, raced, strict=True):
        result.extra.update(
            nodes=contender.nodes, workers_per_node=config.workers if config.url is None else None
        )
        if contender.variant == STARTING_CODE:
            phases.starting_code = {"commit": STARTING_COMMIT, "result": result.as_dict()}
        else:
            phases.results.append(result)


def _starting_code_contender(
    phases: Phases, stack: contextlib.ExitStack[bool | None], calendar_name: str
) -> list[_Contender]:
    """The starting code served beside the engine (bench/starting_code.py), as a contender of the big
    herd; none, and the reason kept for the report, when it cannot be."""
    config = phases.config
    try:
        start = stack.enter_context(
            starting_code(
                config,
                conninfo=phases.conninfo,
                agents=config.agent_count,
                calendar_name=calendar_name,
                progress=phases.progress,
            )
        )
    except NotRaced as exc:
        phases.progress.note(f"herd500: the starting code is not raced: {exc}")
        phases.starting_code = {"commit": STARTING_COMMIT, "not_raced": str(exc)}
        return []
    phases.deployment.adopt(start.url, start.server)
    phases.deployment.warm_up(start.url, keys=start.keys)

    def open_worker(i: int) -> EngineWorker:
        session = HttpSession(
            base_url=start.url,
            raw_key=start.keys[i % len(start.keys)],
            timeout=config.http_timeout,
            idempotency_keys=config.idempotency_keys,
            headers=config.http_headers,
            lean=True,
        )
        return EngineWorker(session, [start.calendar])

    return [_Contender(STARTING_CODE, open_worker, [start.url], start.double_bookings)]


def _interleaved(phases: Phases, contenders: list[_Contender], spans: list[Span]) -> list[ScenarioResult]:
    """Each round raced by each contender in turn (its own calendar, the same span), with the CPU each
    one's rounds cost its servers, the racers' client and PostgreSQL, and how busy the cores were."""
    deployment, agents = phases.deployment, phases.config.herd_racers
    rounds: list[list[list[Outcome]]] = [[] for _ in contenders]
    walls = [0.0 for _ in contenders]
    spent = [_CpuSpent() for _ in contenders]
    with phases.progress.phase(f"{BIG_HERD} · interleaved", total=len(spans), unit="rounds") as bar:
        for span in spans:
            for index, contender in enumerate(contenders):
                before = _CpuReading.now(deployment, contender.servers)
                run = herd(
                    contender.open_worker,
                    agents=agents,
                    spans=[span],
                    time_limit=phases.config.herd_time_limit,
                )
                spent[index].add(before, _CpuReading.now(deployment, contender.servers))
                rounds[index] += run.rounds
                walls[index] += run.wall_seconds
            bar.advance()
    results = []
    for contender, its_rounds, wall, cpu in zip(contenders, rounds, walls, spent, strict=True):
        result = herd_result(
            contender.variant,
            HTTP,
            its_rounds,
            wall,
            agents=agents,
            scenario=BIG_HERD,
            answers_alternatives=contender.variant in ("engine", STARTING_CODE),
        )
        result.extra.update(cpu.per_attempt(result.attempts))
        results.append(result)
    return results
