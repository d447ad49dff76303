"""How the suite runs in parallel (pytest-xdist): how many workers, and a Redis database for each.

Most tests wait rather than compute (HTTP round trips, TTLs running out, Celery workers polling), so
`-n auto` starts twice as many workers as there are cores, at least four and at most eight;
PYTEST_XDIST_AUTO_NUM_WORKERS overrides that, `-n0` runs everything in this process.

Loaded with `-p tests.parallel` (pyproject's addopts) so it runs before the Django settings are read.
Each worker already has its own PostgreSQL test database (pytest-django adds `_gw0`, `_gw1`… to its
name); Redis needs the same, or one worker's Celery test workers would consume another's messages and
one worker's queue purge would drop another's. REDIS_URL is in the environment before pytest starts
(`python3 dev.py test` exports the embedded server's), so the workers inherit it; each worker exports
its own database number in it, and every process it starts (gunicorn, Celery workers) inherits that.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

REDIS_DATABASES = 16  # Redis' default `databases`
MAX_WORKERS = 8  # each worker migrates a test database and starts servers; more stops paying off


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    configured = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if configured and configured.isdigit():
        return int(configured)
    return min(MAX_WORKERS, max(4, 2 * (os.cpu_count() or 1)))


def worker_redis_url(url: str, worker: str) -> str:
    """`redis://host:port/3` for worker gw0 → `/4`, gw1 → `/5`… (wrapping within the 16 databases,
    never back onto the base database while there are at most MAX_WORKERS)."""
    index = int(worker.removeprefix("gw"))
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(base + 1 + index) % REDIS_DATABASES}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("REDIS_URL", "").startswith("redis"):
    os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], _worker)
