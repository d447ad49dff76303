"""How many gunicorn workers a web node runs unless told: `agentcal run` and the benchmark share the rule."""

from __future__ import annotations

import os

# Database hosts that are this machine (none at all, or a path: a Unix socket).
_THIS_MACHINE = {"", "localhost", "127.0.0.1", "::1"}


def default_web_workers() -> int:
    """`web_workers()` for this process's environment and Django's settings."""
    from django.conf import settings

    return web_workers(
        configured=os.environ.get("WEB_CONCURRENCY"),
        database_host=str(settings.DATABASES["default"].get("HOST") or ""),
        embedded_database=settings.USING_EMBEDDED_POSTGRES,
        cores=os.cpu_count() or 1,
    )


def web_workers(*, configured: str | None, database_host: str, embedded_database: bool, cores: int) -> int:
    """WEB_CONCURRENCY (`configured`); else cores + 1 when PostgreSQL runs on this machine, where more
    workers only fight it for the cores; else 2 x cores + 1, to keep the cores busy while requests wait
    on a database elsewhere (docs/performance-notes.md, "Workers per web node")."""
    if configured:
        return int(configured)
    here = embedded_database or database_host in _THIS_MACHINE or database_host.startswith("/")
    return cores + 1 if here else 2 * cores + 1
