from __future__ import annotations

from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Installed only for its management command (`bench`); it has no models."""

    name = "bench"
    verbose_name = "Benchmark"
