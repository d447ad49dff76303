"""Gunicorn started and stopped by the benchmark, on a free loopback port.

The command line is the one `agentcal run` uses (agentcal/cli.py) without the access log, for the
AgentCal app and for the baseline WSGI app alike. The child inherits this process's environment, so it
uses the same DATABASE_URL / REDIS_URL (under `python3 dev.py bench`, the embedded servers' URLs).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

BASE_DIR = Path(__file__).resolve().parent.parent
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GunicornServer:
    """`with GunicornServer("agentcal.wsgi:application", workers=5, health_path="/v1/health") as url:`"""

    def __init__(
        self,
        app: str,
        *,
        workers: int,
        threads: int = 1,
        health_path: str,
        env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        name: str = "",
        cwd: Path = BASE_DIR,
    ) -> None:
        self.app = app
        # The application's tree (`python -m` puts it first on the path): this checkout, or another's.
        self.cwd = cwd
        self.workers = workers
        self.threads = threads
        self.health_path = health_path
        self.env = {**os.environ, **(env or {})}
        # A log folder of our own is removed on stop; failures quote the log's tail in the exception.
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="agentcal-bench-"))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        # Several servers of one app (web nodes) log to files of their own.
        suffix = f"-{name}" if name else ""
        self.log_path = self.log_dir / f"gunicorn-{app.split(':')[0].replace('.', '-')}{suffix}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gunicorn",
            self.app,
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(self.workers),
            # More than one: gunicorn's gthread worker, which also keeps client connections alive.
            "--threads",
            str(self.threads),
            "--graceful-timeout",
            "10",
        ]

    def start(self) -> str:
        self.port = free_loopback_port()
        # A file, not a pipe: nobody reads a pipe while the benchmark runs, and a full one would block.
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(), cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"gunicorn {self.app} exited at start:\n{tail}")
            try:
                if httpx.get(self.url + self.health_path, timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"gunicorn {self.app} did not answer in {START_TIMEOUT_SECONDS:.0f} s:\n{tail}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()  # SIGTERM: gunicorn stops its workers gracefully
            try:
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._own_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def cpu_seconds(self) -> float | None:
        """CPU used so far by the master and its workers (and by workers it has reaped), from /proc; None
        where /proc cannot tell (not Linux)."""
        if self.process is None:
            return None
        return process_tree_cpu(self.process.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def process_tree_cpu(parent: int) -> float | None:
    """CPU used so far by a process, its live children and the children it has reaped (a gunicorn master
    and its workers, a postmaster and its backends), from /proc; None where /proc cannot tell."""
    try:
        total = _cpu_of(parent, include_reaped_children=True)
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = _stat_fields(stat)
            except OSError:
                continue  # exited meanwhile
            if int(fields[1]) == parent:
                total += _ticks(fields, 11) + _ticks(fields, 12)
    except (OSError, IndexError, ValueError):
        return None
    return total


def machine_busy_seconds() -> tuple[float, float] | None:
    """(CPU seconds busy, CPU seconds in all) over every core since boot, from /proc/stat; None where
    /proc cannot tell. Busy is everything but idle and I/O wait."""
    try:
        user, nice, system, idle, iowait, irq, softirq, steal = (
            int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
        )
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = user + nice + system + irq + softirq + steal
    return busy / tick, (busy + idle + iowait) / tick


def parent_of(pid: int, *, named: str) -> int | None:
    """The parent of process `pid`, if that is a process of this machine called `named`; else None."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != named:
            return None
        return int(_stat_fields(Path(f"/proc/{pid}/stat"))[1])
    except (OSError, IndexError, ValueError):
        return None


def _stat_fields(stat: Path) -> list[str]:
    """A /proc/<pid>/stat's fields after the command name (which may hold spaces and parentheses): [1]
    is the parent's pid, [11] to [14] the CPU times."""
    return stat.read_text().rsplit(")", 1)[1].split()


def _cpu_of(pid: int, *, include_reaped_children: bool) -> float:
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    total = _ticks(fields, 11) + _ticks(fields, 12)  # utime, stime (fields 14, 15 of proc(5))
    if include_reaped_children:
        total += _ticks(fields, 13) + _ticks(fields, 14)  # cutime, cstime
    return total


def _ticks(fields: list[str], index: int) -> float:
    return int(fields[index]) / os.sysconf("SC_CLK_TCK")
