"""The benchmark's options, checked, turned into a run and its report (`python -m bench` runs it)."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentcal.sizing import default_web_workers
from bench import report as reports
from bench.config import HTTP, IN_PROCESS, SCENARIOS, BenchConfig
from bench.progress import Progress
from bench.runner import run
from bench.scenarios import MixPlan
from bench.sections import markdown

MODES = (IN_PROCESS, HTTP)


def _csv(allowed: tuple[str, ...]) -> Any:
    def parse(raw: str) -> tuple[str, ...]:
        chosen = tuple(part.strip() for part in raw.split(",") if part.strip())
        unknown = sorted(set(chosen) - set(allowed))
        if unknown or not chosen:
            raise ValueError(f"choose from {', '.join(allowed)}")
        return chosen

    parse.__name__ = "comma-separated list"
    return parse


def _ints(raw: str) -> tuple[int, ...]:
    values = tuple(int(part) for part in raw.split(",") if part.strip())
    if any(v < 0 for v in values):
        raise ValueError("sizes must be ≥ 0")
    return values


class Command(BaseCommand):
    help = (
        "Benchmark the booking engine (in-process and through gunicorn) against a naive read-then-write, "
        "an advisory lock and a raw insert, on the same database in the same run. Writes "
        "docs/benchmark.json, docs/benchmark.md (its results section) and docs/img/benchmark.png."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        size = parser.add_argument_group("size and time caps (the run stops by itself)")
        size.add_argument(
            "--agents", type=int, default=50, help="herd: agents racing for each slot; mix: agents (50)"
        )
        size.add_argument("--rounds", type=int, default=20, help="herd: rounds, a new slot each (20)")
        size.add_argument(
            "--concurrency", type=int, default=8, help="disjoint: concurrent agents, engine and baselines (8)"
        )
        size.add_argument("--calendars", type=int, default=4, help="disjoint: calendars K (4)")
        size.add_argument("--duration", type=float, default=8.0, help="seconds per disjoint or mix phase (8)")
        size.add_argument("--max-ops", type=int, default=50_000, help="operations cap per phase (50000)")
        size.add_argument(
            "--herd-time-limit", type=float, default=60.0, help="seconds cap per herd phase (60)"
        )
        size.add_argument(
            "--key-verify-calls", type=int, default=1000, help="API key verifications timed (1000; 0 skips)"
        )
        size.add_argument(
            "--herd-racers", type=int, default=500, help="herd500: agents racing for each slot (500)"
        )
        size.add_argument("--herd-racers-rounds", type=int, default=5, help="herd500: rounds (5)")
        size.add_argument(
            "--herd-racers-nodes", type=int, default=1, help="herd500: web nodes the racers spread over (1)"
        )
        size.add_argument(
            "--cost-bookings",
            type=int,
            default=200,
            help="cost per booking: bookings timed, then as many traced (200; 0 skips)",
        )
        size.add_argument(
            "--history-sizes",
            type=_ints,
            default=(0, 5_000, 20_000),
            help="history probe: earlier bookings per calendar (0,5000,20000; '' skips)",
        )
        what = parser.add_argument_group("what to run")
        what.add_argument(
            "--scenarios",
            type=_csv(SCENARIOS),
            default=SCENARIOS,
            help=f"{','.join(SCENARIOS)} (all; nodes and herd500 through HTTP only)",
        )
        what.add_argument(
            "--modes",
            type=_csv(MODES),
            default=None,
            help="in-process,http (both; only http with --url)",
        )
        what.add_argument("--no-baselines", action="store_true", help="skip baselines (a), (b) and (c)")
        what.add_argument(
            "--no-starting-code",
            action="store_true",
            help="herd500: do not race the starting code (bench/starting_code.py) beside the engine",
        )
        what.add_argument(
            "--workers",
            type=int,
            default=default_web_workers(),
            help="gunicorn workers per web node (as `agentcal run`)",
        )
        what.add_argument(
            "--threads",
            type=int,
            default=1,
            help="threads per gunicorn worker; more than 1 is gunicorn's gthread worker (1)",
        )
        what.add_argument(
            "--nodes",
            type=int,
            default=2,
            help="nodes scenario: up to this many web nodes, each a gunicorn master of its own (2)",
        )
        what.add_argument("--warmup-requests", type=int, default=20, help="per agent before HTTP phases (20)")
        what.add_argument(
            "--idempotency-keys", action="store_true", help="send an Idempotency-Key on every HTTP write"
        )
        what.add_argument(
            "--naive-gap-ms", type=float, default=0.0, help="pause between read and write in (a), (b)"
        )
        what.add_argument("--mix-ttl", type=int, default=2, help="mix: calendars' hold_ttl_seconds (2)")
        what.add_argument("--mix-think-max", type=float, default=3.0, help="mix: max think time, s (3)")
        what.add_argument(
            "--meeting-agents", type=int, default=50, help="meeting: agents asking at once (50)"
        )
        what.add_argument(
            "--meeting-tries", type=int, default=20, help="meeting (ii): hold attempts before giving up (20)"
        )
        what.add_argument(
            "--meeting-search-calls",
            type=int,
            default=50,
            help="meeting-search: in-process searches timed (50; 0 skips)",
        )
        what.add_argument(
            "--runaway-flood-threads",
            type=int,
            default=16,
            help="runaway: threads the flooding agent sends from (16)",
        )
        what.add_argument(
            "--runaway-worker-threads",
            type=_ints,
            default=(1, 4),
            help="runaway: threads per gunicorn worker to measure it with; 1 is sync workers (1,4)",
        )
        what.add_argument("--seed", type=int, default=1)
        remote = parser.add_argument_group("against a running server")
        remote.add_argument(
            "--url", help="benchmark this server (e.g. http://127.0.0.1:8000) instead of starting one"
        )
        remote.add_argument(
            "--key",
            action="append",
            default=[],
            help="an agent API key for --url (repeat for several agents; needs calendars:write, "
            "bookings:read, bookings:write and max priority ≥ 500)",
        )
        out = parser.add_argument_group("output")
        out.add_argument(
            "--output-dir",
            type=Path,
            default=Path(settings.BASE_DIR) / "docs",
            help="where benchmark.json, benchmark.md and img/benchmark.png go (docs/)",
        )
        out.add_argument("--no-write", action="store_true", help="print the results only")
        out.add_argument("--no-progress", action="store_true", help="no progress bars")
        out.add_argument("--no-migrate", action="store_true", help="do not apply migrations first")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["url"] and not options["key"]:
            raise CommandError("--url needs at least one --key (create_agent_key prints one)")
        for name in (
            "agents",
            "rounds",
            "concurrency",
            "calendars",
            "workers",
            "threads",
            "max_ops",
            "nodes",
            "herd_racers",
            "herd_racers_rounds",
            "herd_racers_nodes",
            "meeting_agents",
            "meeting_tries",
            "runaway_flood_threads",
        ):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if not options["runaway_worker_threads"] or 0 in options["runaway_worker_threads"]:
            raise CommandError("--runaway-worker-threads needs one or more counts, each at least 1")
        if options["duration"] <= 0 or options["mix_ttl"] < 1 or options["cost_bookings"] < 0:
            raise CommandError("--duration must be positive, --mix-ttl at least 1, --cost-bookings ≥ 0")
        modes = options["modes"] or ((HTTP,) if options["url"] else MODES)
        # httpx logs every request at INFO, which the settings' root logger would print thousands of times.
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        if not options["no_migrate"] and not options["url"]:
            call_command("migrate", interactive=False, verbosity=0)
        config = BenchConfig(
            agents=options["agents"],
            rounds=options["rounds"],
            concurrency=options["concurrency"],
            calendars=options["calendars"],
            duration=options["duration"],
            max_ops=options["max_ops"],
            herd_time_limit=options["herd_time_limit"],
            workers=options["workers"],
            threads=options["threads"],
            nodes=options["nodes"],
            herd_racers=options["herd_racers"],
            herd_racers_rounds=options["herd_racers_rounds"],
            herd_racers_nodes=options["herd_racers_nodes"],
            cost_bookings=options["cost_bookings"],
            modes=modes,
            scenarios=options["scenarios"],
            baselines=not options["no_baselines"],
            starting_code=not options["no_starting_code"],
            key_verify_calls=options["key_verify_calls"],
            history_sizes=options["history_sizes"],
            naive_gap_seconds=options["naive_gap_ms"] / 1000,
            mix=MixPlan(ttl_seconds=options["mix_ttl"], think_max=options["mix_think_max"]),
            meeting_agents=options["meeting_agents"],
            meeting_tries=options["meeting_tries"],
            meeting_search_calls=max(options["meeting_search_calls"], 0),
            runaway_flood_threads=options["runaway_flood_threads"],
            runaway_worker_threads=options["runaway_worker_threads"],
            warmup_requests=options["warmup_requests"],
            idempotency_keys=options["idempotency_keys"],
            seed=options["seed"],
            url=options["url"],
            keys=tuple(options["key"]),
            command=_reproduce_command(),
        )
        result = run(config, progress=Progress(enabled=not options["no_progress"]))
        self.stdout.write(markdown(result))
        if not options["no_write"]:
            for note in reports.write_all(result, docs_dir=options["output_dir"]):
                self.stderr.write(note)
            self.stderr.write(
                f"wrote {options['output_dir']}/benchmark.json, benchmark.md, img/benchmark.png"
            )
        invariants = [g for g in result.data["goals"] if g["goal"].startswith(("zero double", "exactly one"))]
        failed = [g for g in invariants if g["met"] is False]
        if failed:
            raise CommandError("invariant broken: " + "; ".join(g["goal"] for g in failed))


def _reproduce_command() -> str:
    """The command line as typed (keys redacted), with the environment that chose the database."""
    shown: list[str] = []
    hide_next = False
    for arg in sys.argv[1:]:
        if hide_next:
            shown.append("<key>")
            hide_next = False
        elif arg == "--key":
            shown.append(arg)
            hide_next = True
        elif arg.startswith("--key="):
            shown.append("--key=<key>")
        else:
            shown.append(arg)
    if not getattr(settings, "USING_EMBEDDED_POSTGRES", False):
        return shlex.join(["python", "-m", "bench", *shown])
    # The embedded servers come from dev.py's launcher, which starts them when the variables are unset.
    prefix = ["env", "-u", "DATABASE_URL", "-u", "REDIS_URL"]
    if os.environ.get("AGENTCAL_DATA_DIR"):
        prefix.append(f"AGENTCAL_DATA_DIR={os.environ['AGENTCAL_DATA_DIR']}")
    return shlex.join([*prefix, "python3", "dev.py", "bench", *shown])
