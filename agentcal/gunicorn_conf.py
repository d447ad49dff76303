"""gunicorn hooks for `agentcal run`."""

from __future__ import annotations

from typing import Any


def child_exit(server: Any, worker: Any) -> None:
    # A worker that exits leaves its metric files; mark them dead so gauges stop counting it.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
