"""How the report writes a number: ratios, milliseconds, counts, percentages, a goal's verdict."""

from __future__ import annotations

import math
from typing import Any

from bench.stats import VARIANT_LABELS


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def fmt_ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"


def num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def met(value: bool | str | None) -> str:
    return {True: "✅ met", False: "❌ missed", None: "— not measured", "info": "ℹ️ context"}[value]


def variant_label(row: dict[str, Any]) -> str:
    return str(VARIANT_LABELS.get(row["variant"], row["variant"]))


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
