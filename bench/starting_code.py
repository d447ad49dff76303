"""The code the agent request path's cuts started from, served beside the engine for the big herd.

Its tree comes from git; this harness is copied into it (bench/ and agentcal/sizing.py), and its own code
migrates a database of its own (beside the run's, on the same server), makes the racers' agents, keys and
calendar, and serves it through gunicorn with this run's settings. The big herd then races it round by
round with the engine (bench/phases.py), so a slower minute of a shared machine falls on both. A clone
without the commit, or behind a transaction pooler, is said (`NotRaced`), not hidden.
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench.config import BenchConfig
from bench.progress import Progress
from bench.server import GunicornServer
from bench.targets import OVERLAPPING_LIVE_PAIRS_SQL

STARTING_COMMIT = "c7b6e03"
BASE_DIR = Path(__file__).resolve().parent.parent
# What the starting code is served and driven with: this benchmark, and the worker count it derives.
HARNESS = ("bench", "agentcal/sizing.py")
DATABASE_SUFFIX = "_starting_code"
SETUP_TIMEOUT_SECONDS = 300
# Run by the starting code's interpreter, in its tree: its agents, keys and calendar, made by its own code
# through this harness's LocalTarget (as the engine's are), printed as JSON.
_SETUP = """
import json, sys
import django
django.setup()
from bench.targets import LocalTarget
target = LocalTarget(agents=int(sys.argv[1]))
calendar = target.calendar_create(sys.argv[2])
print(json.dumps({"keys": target.raw_keys, "calendar": calendar}))
"""


class NotRaced(Exception):
    """Why the starting code could not be raced in this run."""


@dataclass
class StartingCode:
    """The starting code's server, its racers' keys and the calendar they race for."""

    url: str
    server: GunicornServer
    keys: list[str]
    calendar: str
    conninfo: str

    def double_bookings(self) -> int:
        """Pairs of live reservations overlapping on its calendar, by the same SQL as the engine's."""
        with psycopg.connect(self.conninfo, prepare_threshold=None) as conn:
            row = conn.execute(
                "SELECT id FROM bookings_calendar WHERE public_id = %s", [self.calendar]
            ).fetchone()
            assert row is not None
            counted = conn.execute(OVERLAPPING_LIVE_PAIRS_SQL, [[row[0]]]).fetchone()
            assert counted is not None
            return int(counted[0])


@contextlib.contextmanager
def starting_code(
    config: BenchConfig, *, conninfo: str, agents: int, calendar_name: str, progress: Progress
) -> Iterator[StartingCode]:
    """The starting code served, its `agents` keys made and its calendar created, until the block ends;
    `NotRaced` when it cannot be."""
    progress.note(f"serving the starting code ({STARTING_COMMIT}) beside the engine")
    with _starting_tree() as tree, _database_of_its_own(config, conninfo) as (url, own_conninfo):
        env = {
            **config.server_env,
            "DATABASE_URL": url,
            "PYTHONPATH": str(tree),
            "DJANGO_SETTINGS_MODULE": "agentcal.settings",
        }
        _run_in(tree, env, [sys.executable, "manage.py", "migrate", "--verbosity", "0"], "its migrations")
        made = json.loads(
            _run_in(tree, env, [sys.executable, "-c", _SETUP, str(agents), calendar_name], "its agents")
        )
        server = GunicornServer(
            "agentcal.wsgi:application",
            workers=config.workers,
            threads=config.threads,
            health_path="/v1/health",
            env=env,
            log_dir=config.log_dir,
            name="starting-code",
            cwd=tree,
        )
        try:
            server_url = server.start()
        except RuntimeError as exc:
            raise NotRaced(f"its server did not start: {str(exc).splitlines()[0]}") from exc
        try:
            yield StartingCode(server_url, server, made["keys"], made["calendar"], own_conninfo)
        finally:
            server.stop()


def _run_in(tree: Path, env: dict[str, str], command: list[str], what: str) -> str:
    try:
        run = subprocess.run(
            command,
            cwd=tree,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=False,
            timeout=SETUP_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        raise NotRaced(f"{what} took over {SETUP_TIMEOUT_SECONDS} s") from exc
    if run.returncode != 0:
        tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        raise NotRaced(f"{what} failed (exit {run.returncode}): {tail}")
    return run.stdout


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
def _database_of_its_own(config: BenchConfig, conninfo: str) -> Iterator[tuple[str, str]]:
    """A fresh database beside this run's, on the same server (dropped after): its DATABASE_URL and its
    libpq connection string."""
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
            yield urlunsplit(urlsplit(given)._replace(path=f"/{name}")), make_conninfo(conninfo, dbname=name)
        finally:
            conn.execute(drop)
