"""The big herd against the code the agent request path's cuts started from, raced in the same run.

Its tree comes from git; this harness is copied into it (bench/ and agentcal/sizing.py: the same racers,
server command, worker count and CPU accounting), and a `python -m bench --scenarios herd500` of its own
races it on a database of its own, on the same PostgreSQL, Redis and cores, right after the engine's big
herd. Only the application differs. A clone without the commit, or a failed race, is said, not hidden.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.config import BIG_HERD, HTTP, BenchConfig
from bench.progress import Progress

STARTING_COMMIT = "c7b6e03"
BASE_DIR = Path(__file__).resolve().parent.parent
# What the starting code is raced with: this benchmark, and the worker count it derives.
HARNESS = ("bench", "agentcal/sizing.py")
DATABASE_SUFFIX = "_starting_code"


class NotRaced(Exception):
    """Why the starting code could not be raced in this run."""


def starting_code_herd(config: BenchConfig, *, conninfo: str, progress: Progress) -> dict[str, Any]:
    """`{"commit", "result"}`, the starting code's big herd as benchmark.json records one, or `{"commit",
    "not_raced"}`, why not."""
    progress.note(f"{BIG_HERD}: racing the starting code ({STARTING_COMMIT}) the same way")
    try:
        with _starting_tree() as tree, _database_of_its_own(config, conninfo) as url:
            return {"commit": STARTING_COMMIT, "result": _race(tree, url, config)}
    except NotRaced as exc:
        progress.note(f"{BIG_HERD}: the starting code was not raced: {exc}")
        return {"commit": STARTING_COMMIT, "not_raced": str(exc)}


@contextlib.contextmanager
def _starting_tree() -> Iterator[Path]:
    """The starting commit's files with this harness in place of its own, in a folder removed after."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(BASE_DIR), "archive", "--format=tar", STARTING_COMMIT],
            capture_output=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotRaced(f"git could not be run ({exc})") from exc
    if archive.returncode != 0:
        raise NotRaced(f"this clone has no commit {STARTING_COMMIT} (a shallow clone, or no git history)")
    with tempfile.TemporaryDirectory(prefix="agentcal-bench-starting-code-") as folder:
        tree = Path(folder)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")
        for path in HARNESS:
            source, target = BASE_DIR / path, tree / path
            if source.is_dir():
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, target)
        yield tree


@contextlib.contextmanager
def _database_of_its_own(config: BenchConfig, conninfo: str) -> Iterator[str]:
    """A fresh database beside this run's, on the same server (dropped after), as a DATABASE_URL."""
    from django.conf import settings

    if getattr(settings, "DB_TRANSACTION_POOLER", False):
        raise NotRaced("behind a transaction pooler, which knows no database made for the race")
    given = config.server_env.get("DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not given:
        raise NotRaced("no DATABASE_URL to give it")
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        name = f"{conn.info.dbname}{DATABASE_SUFFIX}"
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield urlunsplit(urlsplit(given)._replace(path=f"/{name}"))
        finally:
            conn.execute(drop)


def _race(tree: Path, database_url: str, config: BenchConfig) -> dict[str, Any]:
    """Its own benchmark's big herd, with this run's sizes; its result as its benchmark.json has it."""
    out = tree / "benchmark-out"
    command = [
        sys.executable,
        "-m",
        "bench",
        "--scenarios",
        BIG_HERD,
        "--modes",
        HTTP,
        "--no-baselines",
        "--no-starting-code",
        "--no-progress",
        "--output-dir",
        str(out),
        "--agents",
        str(config.agents),
        "--workers",
        str(config.workers),
        "--threads",
        str(config.threads),
        "--herd-racers",
        str(config.herd_racers),
        "--herd-racers-rounds",
        str(config.herd_racers_rounds),
        "--herd-time-limit",
        str(config.herd_time_limit),
        "--warmup-requests",
        str(config.warmup_requests),
    ]
    env = {
        **os.environ,
        **config.server_env,
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(tree),
        "DJANGO_SETTINGS_MODULE": "agentcal.settings",
    }
    try:
        run = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, check=False, timeout=900
        )
    except subprocess.TimeoutExpired as exc:
        raise NotRaced("its run took over 15 minutes") from exc
    if run.returncode != 0:
        tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        raise NotRaced(f"its run failed (exit {run.returncode}): {tail}")
    results = json.loads((out / "benchmark.json").read_text())["results"]
    herd = next((r for r in results if r["scenario"] == BIG_HERD and r["variant"] == "engine"), None)
    if herd is None:
        raise NotRaced("its run reported no big herd")
    return dict(herd)
