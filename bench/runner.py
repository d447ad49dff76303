"""The whole benchmark in one call: `run(BenchConfig(...))` returns the report (see bench.report).

Phases run one after the other, each on its own fresh calendars (or baseline calendar ids), so they
never see each other's rows: engine in-process, engine through HTTP, then the baselines, for each
scenario (bench.phases). Everything a phase does is bounded: herd by --rounds and a time limit, the
others by --duration and --max-ops.

Two scenarios are about scale-out, through HTTP only: `nodes` runs the disjoint workload and the herd
through 1, 2, … `--nodes` independent gunicorn masters (web nodes, bench.deployment) at once, agent i
talking to node i mod n, and `herd500` races `--herd-racers` agents (500) for one slot per round.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from bench import baselines, measurements, report
from bench.config import IN_PROCESS, SCENARIOS, BenchConfig
from bench.cost import cost_probe
from bench.deployment import Deployment
from bench.history import history_probe
from bench.phases import Phases
from bench.progress import Progress
from bench.targets import LocalTarget, RemoteTarget


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
        self.base = (datetime.now(UTC) + timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)
        self.target: LocalTarget | RemoteTarget
        self.deployment: Deployment
        self.phases: Phases

    def run(self) -> report.Report:
        config = self.config
        started = time.monotonic()
        load_before = measurements.load_average()
        # Read now, before anything runs: the code measured is the code imported at start.
        commit = measurements.git_commit()
        if config.url:
            self.target = RemoteTarget(base_url=config.url, keys=config.keys, timeout=config.http_timeout)
        else:
            self.progress.note(f"creating {config.agent_count} agents and their API keys")
            self.target = LocalTarget(agents=config.agent_count)
        conninfo = conninfo_for_baselines()
        self.deployment = Deployment(config, target=self.target, conninfo=conninfo, progress=self.progress)
        self.phases = Phases(
            config,
            target=self.target,
            deployment=self.deployment,
            conninfo=conninfo,
            base=self.base,
            progress=self.progress,
        )
        with contextlib.ExitStack() as stack:
            if config.baselines:
                baselines.schema_create(conninfo, config.baseline_schema)
                stack.callback(baselines.schema_drop, conninfo, config.baseline_schema)
            if self.phases.http:
                self.deployment.start(stack)
            for scenario in SCENARIOS:
                if scenario in config.scenarios:
                    self.phases.run(scenario)
            in_process = IN_PROCESS in self.phases.engine_modes
            key_verify = self._key_verify() if in_process and config.key_verify_calls else None
            history = self._history() if in_process and config.history_sizes else None
            cost = self._cost() if in_process and config.cost_bookings else None
        return report.build(
            results=self.phases.results,
            key_verify=key_verify,
            history=history,
            cost=cost,
            starting_code=self.phases.starting_code,
            machine={**measurements.machine(config, load_before), "commit": commit},
            config=config,
            wall_seconds=time.monotonic() - started,
        )

    # --- API key verification --------------------------------------------------------------------------

    def _key_verify(self) -> dict[str, Any]:
        assert isinstance(self.target, LocalTarget)
        return measurements.key_verify_probe(
            self.target, calls=self.config.key_verify_calls, progress=self.progress
        )

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


def run(config: BenchConfig, *, progress: Progress | None = None) -> report.Report:
    return Bench(config, progress).run()
