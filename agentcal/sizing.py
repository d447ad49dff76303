"""How many gunicorn workers a web node runs unless told: `agentcal run` and the benchmark share the rule."""

from __future__ import annotations

import os

# Database hosts that are this machine (none at all, or a path: a Unix socket).
_THIS_MACHINE = {"", "localhost", "127.0.0.1", "::1"}


def default_web_workers() -> int:
    """WEB_CONCURRENCY; else cores + 1 when PostgreSQL runs on this machine, where more workers only fight
    it for the cores; else 2 x cores + 1, to keep the cores busy while requests wait on a database
    elsewhere (docs/performance-notes.md, "Workers per web node"). Needs Django's settings."""
    if configured := os.environ.get("WEB_CONCURRENCY"):
        return int(configured)
    from django.conf import settings

    cores = os.cpu_count() or 1
    host = str(settings.DATABASES["default"].get("HOST") or "")
    here = settings.USING_EMBEDDED_POSTGRES or host in _THIS_MACHINE or host.startswith("/")
    return cores + 1 if here else 2 * cores + 1
