"""The servers one run talks to through HTTP: its web nodes and the baseline app, started or given.

Each web node is a gunicorn master of its own (`agentcal.wsgi`, as `agentcal run` starts it); the
baseline app is `bench.baseline_wsgi` under the same gunicorn settings. Servers this run started report
their CPU time, which the phases read before and after each one.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
from collections.abc import Iterator, Sequence

import psycopg
from django.conf import settings

from bench.baseline_wsgi import ENV_CONNINFO, ENV_PREPARE, ENV_SCHEMA
from bench.clients import http_client
from bench.config import BIG_HERD, BenchConfig
from bench.progress import Progress
from bench.scenarios import run_threads
from bench.server import GunicornServer, parent_of, process_tree_cpu
from bench.targets import LocalTarget, RemoteTarget


def prepare_baselines() -> bool:
    """The baselines prepare their statements, except behind a transaction-mode pooler."""
    return not getattr(settings, "DB_TRANSACTION_POOLER", False)


class Deployment:
    def __init__(
        self, config: BenchConfig, *, target: LocalTarget | RemoteTarget, conninfo: str, progress: Progress
    ) -> None:
        self.config = config
        self.target = target
        self.conninfo = conninfo
        self.progress = progress
        self.app_url: str | None = None
        self.node_urls: list[str] = []  # web node 0 is app_url
        self.baseline_url: str | None = None
        # The gunicorns this run started (web nodes, the baseline app), by URL: their CPU is read per phase.
        self._servers: dict[str, GunicornServer] = {}

    def start(self, stack: contextlib.ExitStack[bool | None]) -> None:
        """Start (or take as given) every server, each stopped when `stack` closes; then warm them up."""
        config = self.config
        self.app_url = config.url or config.server_url or stack.enter_context(self.app_server("node0"))
        self.node_urls = [self.app_url]
        for index in range(1, self._nodes_wanted()):
            self.node_urls.append(stack.enter_context(self.app_server(f"node{index}")))
        if config.baselines:
            self.baseline_url = config.baseline_server_url or stack.enter_context(self._baseline_server())
        for url in self.node_urls:
            self.warm_up(url)

    @property
    def starts_servers(self) -> bool:
        """Whether this run starts its own gunicorns (not with --url, nor with a test's server)."""
        return not (self.config.url or self.config.server_url)

    def _nodes_wanted(self) -> int:
        """Web nodes to start: only with servers of our own (with --url or a test's server there is one)."""
        config = self.config
        if not self.starts_servers:
            return 1
        wanted = 1
        if "nodes" in config.scenarios:
            wanted = max(wanted, config.nodes)
        if BIG_HERD in config.scenarios:
            wanted = max(wanted, config.herd_racers_nodes)
        return wanted

    @contextlib.contextmanager
    def app_server(
        self, name: str, *, threads: int | None = None, env: dict[str, str] | None = None
    ) -> Iterator[str]:
        """One web node: a gunicorn master of its own, on a port of its own. Nodes share nothing but the
        database and Redis, as separate machines would. `threads` (else --threads) and `env` (added to
        the run's server environment) are for a scenario's own server."""
        threads = threads or self.config.threads
        self.progress.note(
            f"starting {name}: gunicorn agentcal.wsgi:application with {self.config.workers} "
            f"workers × {threads} threads"
        )
        server = GunicornServer(
            "agentcal.wsgi:application",
            workers=self.config.workers,
            threads=threads,
            health_path="/v1/health",
            env={**self.config.server_env, **(env or {})},
            log_dir=self.config.log_dir,
            name=name,
        )
        with server as url:
            self._servers[url] = server
            yield url

    def adopt(self, url: str, server: GunicornServer) -> None:
        """A server started elsewhere in the run (the starting code's): its CPU is read as ours are."""
        self._servers[url] = server

    def web_cpu(self, urls: Sequence[str]) -> float | None:
        """CPU seconds used so far by the gunicorns at these URLs (None unless this run started them all)."""
        servers = [self._servers.get(url) for url in urls]
        seconds = [server.cpu_seconds() if server else None for server in servers]
        return None if any(s is None for s in seconds) else sum(s for s in seconds if s is not None)

    def database_cpu(self) -> float | None:
        """CPU seconds used so far by the PostgreSQL server (its postmaster and every backend), when it
        runs on this machine; None when it does not, or /proc cannot tell."""
        postmaster = self._postmaster
        return None if postmaster is None else process_tree_cpu(postmaster)

    @functools.cached_property
    def _postmaster(self) -> int | None:
        """The server's postmaster: the parent of a backend, if the server is on this machine (a Unix
        socket or a loopback address) and that backend is one of this machine's processes."""
        with psycopg.connect(self.conninfo, prepare_threshold=None) as conn:
            row = conn.execute("SELECT pg_backend_pid(), host(inet_server_addr())").fetchone()
            assert row is not None
            backend, address = row
            if address is not None and not ipaddress.ip_address(address).is_loopback:
                return None
            return parent_of(backend, named="postgres")  # while the backend lives

    @contextlib.contextmanager
    def _baseline_server(self) -> Iterator[str]:
        env = {
            **self.config.server_env,
            ENV_CONNINFO: self.conninfo,
            ENV_SCHEMA: self.config.baseline_schema,
            ENV_PREPARE: "1" if prepare_baselines() else "0",
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

    def warm_up(self, url: str, agents: Sequence[int] | None = None, *, keys: Sequence[str] = ()) -> None:
        """Not measured: each gunicorn worker pays argon2 once per key (tens of ms) on first use. Many
        concurrent requests per key make it very likely every worker has seen every key before timing.
        Every agent's key, or only those of `agents` (indices), or these `keys` (another server's)."""
        chosen = list(agents) if agents is not None else list(range(len(keys) or self.config.agent_count))
        per_agent = self.config.warmup_requests
        if per_agent <= 0:
            return
        failures: list[int] = []
        with self.progress.phase(f"warm-up (keys x workers) {url}", total=len(chosen), unit="agents") as bar:

            def warm(thread: int) -> None:
                index = chosen[thread]
                with http_client(
                    f"{url}/v1",
                    headers={
                        "Authorization": f"Bearer {keys[index] if keys else self.target.key(index)}",
                        **self.config.http_headers,
                    },
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

            run_threads(len(chosen), warm)
        if failures:
            raise RuntimeError(f"warm-up requests failed ({len(failures)}, e.g. HTTP {failures[0]})")
