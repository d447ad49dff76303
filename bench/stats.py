"""What one benchmarked operation returned, and the numbers a scenario reports about many of them."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

OK_STATUSES = frozenset({200, 201})
# Error codes that are an expected, correct answer in the scenarios (not an error of the system).
CONFLICT = "slot_conflict"
HOLD_LOST_CODES = frozenset({"hold_expired", "hold_evicted"})


@dataclass(frozen=True)
class Outcome:
    """One request: an HTTP-like status (0 when no answer came back), the machine error code, if any."""

    op: str  # "hold", "commit", "release", "insert"
    status: int
    seconds: float
    code: str = ""
    hold_id: str = ""
    hold_token: str = ""
    # Number of alternative slots offered with a 409 slot_conflict.
    alternatives: int = 0

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES

    @property
    def conflict(self) -> bool:
        return self.code == CONFLICT


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); `sorted_values` must be sorted."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    weight = position - lower
    return sorted_values[lower] * (1 - weight) + sorted_values[upper] * weight


def latency_summary(seconds: Iterable[float]) -> dict[str, float | int]:
    values = sorted(s * 1000 for s in seconds)
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": values[-1] if values else math.nan,
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown (None, NaN) or the denominator is 0."""
    if numerator is None or denominator is None or math.isnan(numerator) or math.isnan(denominator):
        return None
    return numerator / denominator if denominator else None


@dataclass
class Recorder:
    """Outcomes collected from many threads; list.append is atomic, the lock guards the counters."""

    outcomes: list[Outcome] = field(default_factory=list)
    completed_bookings: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def booking_done(self) -> None:
        with self._lock:
            self.completed_bookings += 1

    def __len__(self) -> int:
        return len(self.outcomes)


@dataclass
class ScenarioResult:
    """One row of the results table: a scenario run by one variant (engine or a baseline) in one mode."""

    scenario: str  # "herd", "disjoint", "mix"
    variant: str  # "engine", "naive", "advisory_lock", "raw_insert"
    mode: str  # "in-process", "http", "psycopg"
    outcomes: list[Outcome]
    wall_seconds: float
    double_bookings: int | None
    completed_bookings: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        variant = VARIANT_LABELS.get(self.variant, self.variant)
        return f"{scenario_label(self.scenario, self.extra)} · {variant} · {self.mode}"

    @property
    def attempts(self) -> int:
        return len(self.outcomes)

    @property
    def successes(self) -> int:
        return sum(1 for o in self.outcomes if o.ok)

    @property
    def conflicts(self) -> int:
        return sum(1 for o in self.outcomes if o.conflict)

    @property
    def lost_holds(self) -> int:
        return sum(1 for o in self.outcomes if o.code in HOLD_LOST_CODES)

    @property
    def errors(self) -> int:
        return self.attempts - self.successes - self.conflicts - self.lost_holds

    @property
    def ops_per_second(self) -> float:
        return self.attempts / self.wall_seconds if self.wall_seconds > 0 else math.nan

    @property
    def bookings_per_second(self) -> float:
        return self.completed_bookings / self.wall_seconds if self.wall_seconds > 0 else math.nan

    def latency(self, predicate: Any = None) -> dict[str, float | int]:
        chosen = self.outcomes if predicate is None else [o for o in self.outcomes if predicate(o)]
        return latency_summary(o.seconds for o in chosen)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "mode": self.mode,
            "label": self.label,
            "attempts": self.attempts,
            "successes": self.successes,
            "conflicts": self.conflicts,
            "lost_holds": self.lost_holds,
            "errors": self.errors,
            "error_codes": _error_codes(self.outcomes),
            "double_bookings": self.double_bookings,
            "completed_bookings": self.completed_bookings,
            "wall_seconds": self.wall_seconds,
            "ops_per_second": self.ops_per_second,
            "bookings_per_second": self.bookings_per_second,
            "latency_ms": self.latency(),
            **self.extra,
        }


def herd_result(
    variant: str,
    mode: str,
    rounds: list[list[Outcome]],
    wall_seconds: float,
    *,
    agents: int,
    scenario: str,
    answers_alternatives: bool,
) -> ScenarioResult:
    """A herd's rounds as the report has them: latencies of all, of winners and of losers, winners per
    round; with `answers_alternatives` (the engine's, old or new), how many losers got none."""
    outcomes = [o for round_outcomes in rounds for o in round_outcomes]
    winners = [sum(1 for o in round_outcomes if o.ok) for round_outcomes in rounds]
    result = ScenarioResult(scenario, variant, mode, outcomes, wall_seconds, double_bookings=None)
    winner_latency = result.latency(lambda o: o.ok)
    loser_latency = result.latency(lambda o: o.conflict)
    result.completed_bookings = sum(winners)
    result.extra = {
        "agents": agents,
        "rounds": len(rounds),
        "rounds_with_one_winner": sum(1 for w in winners if w == 1),
        "rounds_with_several_winners": sum(1 for w in winners if w > 1),
        "rounds_without_winner": sum(1 for w in winners if w == 0),
        "winner_latency_ms": winner_latency,
        "loser_latency_ms": loser_latency,
        "loser_p99_over_winner_p99": ratio(loser_latency["p99"], winner_latency["p99"]),
    }
    if answers_alternatives:
        result.extra["losers_without_alternatives"] = sum(
            1 for o in outcomes if o.conflict and o.alternatives == 0
        )
    return result


def find(results: list[ScenarioResult], scenario: str, variant: str, mode: str) -> ScenarioResult | None:
    return next(
        (r for r in results if (r.scenario, r.variant, r.mode) == (scenario, variant, mode)),
        None,
    )


def scenario_label(scenario: str, extra: dict[str, Any]) -> str:
    """The scenario's name, with the number of web nodes or the kind of web worker where the scenario
    varies it."""
    nodes = extra.get("nodes")
    if nodes and scenario.startswith("nodes-"):
        return f"{scenario} ×{nodes}"
    threads = extra.get("worker_threads")
    if threads and scenario.startswith("runaway-"):
        return f"{scenario} ({worker_kind(threads)})"
    return scenario


def worker_kind(threads: int) -> str:
    """Gunicorn's worker class for this many threads per worker."""
    return "sync workers" if threads == 1 else f"gthread ×{threads}"


VARIANT_LABELS = {
    "engine": "engine",
    "naive": "(a) naive read-then-write",
    "advisory_lock": "(b) advisory lock",
    "raw_insert": "(c) raw insert",
    "guarded": "(d) same rows, bare SQL",
    "find_and_hold": "(i) find-and-hold",
    "client_side": "(ii) read, intersect, hold, retry",
    "search": "find_common_time",
    "flood": "the runaway agent",
}


def _error_codes(outcomes: Iterable[Outcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in outcomes:
        if not o.ok and not o.conflict and o.code not in HOLD_LOST_CODES:
            name = f"{o.status} {o.code}".strip()
            counts[name] = counts.get(name, 0) + 1
    return counts
