"""What one run does: `BenchConfig` (the command's options), the modes and the scenarios' names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentcal.sizing import default_web_workers
from bench.baselines import DEFAULT_SCHEMA
from bench.scenarios import MixPlan

IN_PROCESS, HTTP = "in-process", "http"
# The runaway scenario runs last: it gives its flooding agent (the last agent; the big herd's racers, more
# than the agents, speak as it too) limits of its own, low ones.
SCENARIOS = ("herd", "disjoint", "mix", "nodes", "herd500", "meeting", "runaway")
UNCONGESTED = "herd-uncongested"  # the herd with as many racers as gunicorn workers (HTTP only)
NODES_DISJOINT, NODES_HERD = "nodes-disjoint", "nodes-herd"  # the scale-out scenario's two workloads
BIG_HERD = "herd500"
# The runaway scenario's rows: the well-behaved agents alone, beside a flooding agent, and alone on a
# server whose per-agent request-rate check is off; the flooding agent's own requests.
RUNAWAY_CALM, RUNAWAY_FLOOD, RUNAWAY_LIMITS_OFF = "runaway-calm", "runaway-flood", "runaway-limits-off"


@dataclass
class BenchConfig:
    agents: int = 50  # herd racers
    rounds: int = 20  # herd rounds, one fresh slot each
    concurrency: int = 8  # agents (threads) in disjoint, for the engine and the baselines alike
    calendars: int = 4  # K: calendars the disjoint agents spread over
    duration: float = 8.0  # seconds per timed phase (disjoint, mix)
    max_ops: int = 50_000  # cap per timed phase
    herd_time_limit: float = 60.0  # seconds per herd phase; rounds not started by then are skipped
    workers: int = field(default_factory=default_web_workers)  # gunicorn workers per node, as `agentcal run`
    threads: int = 1  # threads per gunicorn worker, as `agentcal run` (WEB_THREADS)
    nodes: int = 1  # nodes scenario: web nodes (gunicorn masters), measured with 1, 2, … of them
    herd_racers: int = 500  # herd500: agents racing for each slot
    herd_racers_rounds: int = 5
    herd_racers_nodes: int = 1  # herd500: web nodes the racers are spread over
    # herd500: race the code the request path's cuts started from too, the same way (bench/starting_code.py).
    starting_code: bool = True
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
    meeting_agents: int = 50  # meeting: agents after a meeting of the same three people at once
    meeting_tries: int = 20  # meeting, read-intersect-hold strategy: hold attempts before giving up
    meeting_search_calls: int = 50  # meeting-search: find_common_time calls timed (0 skips)
    runaway_flood_threads: int = 16  # runaway: the flooding agent's concurrent requests
    runaway_flood_rate: float = 20.0  # runaway: the flooding agent's own requests per second …
    runaway_flood_burst: int = 40  # … and burst
    # runaway: threads per gunicorn worker it is measured with (1: sync workers; more: gthread), each on a
    # server of its own.
    runaway_worker_threads: tuple[int, ...] = (1, 4)
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
    command: str = "python -m bench"

    @property
    def agent_count(self) -> int:
        """Agents (each with its own API key) the run creates: enough for every scenario chosen, and the
        runaway scenario's flooding agent after them all."""
        meeting = self.meeting_agents if "meeting" in self.scenarios else 0
        runaway = 1 if "runaway" in self.scenarios else 0
        return max(self.agents, self.concurrency, meeting) + runaway

    @property
    def runaway_agent(self) -> int:
        """The flooding agent's index: the last one, after every agent the other scenarios count on."""
        return self.agent_count - 1
