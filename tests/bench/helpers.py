"""Helpers for the benchmark harness's tests: tiny runs."""

from __future__ import annotations

from typing import Any

from bench.config import IN_PROCESS, BenchConfig
from bench.scenarios import MixPlan

TEST_SCHEMA = "bench_test"


def tiny(**overrides: Any) -> BenchConfig:
    """A run of a few agents and rounds, in-process only, no key timing, no files."""
    settings: dict[str, Any] = {
        "agents": 4,
        "rounds": 3,
        "concurrency": 4,
        "calendars": 2,
        "duration": 1.0,
        "max_ops": 400,
        "herd_time_limit": 20.0,
        "modes": (IN_PROCESS,),
        "scenarios": ("herd",),
        "baselines": False,
        "starting_code": False,
        "key_verify_calls": 0,
        "history_sizes": (),
        "warmup_requests": 2,
        "baseline_schema": TEST_SCHEMA,
        "mix": MixPlan(calendars=2, slots=12, think_max=1.2, ttl_seconds=1),
    }
    settings.update(overrides)
    return BenchConfig(**settings)
