"""What a run reports beside its scenarios: the machine it ran on, and API key verification timed."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.db import connection

from bench.config import BenchConfig
from bench.progress import Progress
from bench.stats import latency_summary
from bench.targets import BENCH_SCOPES, LocalTarget
from workspaces.keys import api_key_create, api_key_verify
from workspaces.models import Agent


def git_commit() -> str | None:
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


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine(config: BenchConfig, load_before: list[float] | None) -> dict[str, Any]:
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
        "load_average_after": load_average(),
    }


def key_verify_probe(target: LocalTarget, *, calls: int, progress: Progress) -> dict[str, Any]:
    """In-process: the first call pays argon2, later ones the cached HMAC plus the key-row read."""
    agent = Agent.objects.get(pk=target.agent_pks[0])
    _key, raw = api_key_create(agent=agent, scopes=list(BENCH_SCOPES))
    started = time.perf_counter()
    api_key_verify(raw)
    first = time.perf_counter() - started
    samples = []
    with progress.phase("api key verification", total=calls, unit="calls") as bar:
        for _ in range(calls):
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
