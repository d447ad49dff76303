from __future__ import annotations

import pytest

from bench.report import find
from bench.runner import Bench
from tests.bench.conftest import tiny

pytestmark = pytest.mark.django_db(transaction=True)


def test_disjoint_books_without_conflicts_or_double_bookings() -> None:
    report = Bench(tiny(scenarios=("disjoint",), baselines=True)).run()

    engine = find(report.results, "disjoint", "engine", "in-process")
    assert engine is not None
    assert engine.double_bookings == 0
    assert engine.errors == engine.conflicts == 0
    assert engine.completed_bookings > 0
    # Hold then commit: two writes per booking.
    assert engine.attempts == 2 * engine.completed_bookings
    for variant in ("naive", "advisory_lock", "raw_insert"):
        baseline = find(report.results, "disjoint", variant, "psycopg")
        assert baseline is not None, variant
        assert baseline.double_bookings == 0
        assert baseline.errors == 0
        assert baseline.completed_bookings == baseline.attempts > 0
    names = {(r["engine_mode"], r["baseline_variant"]) for r in report.data["ratios"]}
    assert {("in-process", "raw_insert"), ("in-process", "advisory_lock")} <= names


def test_mix_accounts_for_every_hold_and_never_double_books() -> None:
    report = Bench(tiny(scenarios=("mix",), agents=6, duration=2.0)).run()

    mix = find(report.results, "mix", "engine", "in-process")
    assert mix is not None
    assert mix.double_bookings == 0
    assert mix.errors == 0
    extra = mix.extra
    assert extra["holds_granted"] > 0
    # Every granted hold got exactly one decision, and each ended one of these ways.
    assert extra["holds_granted"] == (
        extra["committed"] + extra["released"] + extra["expired"] + extra["evicted"] + extra["failed_other"]
    )
    assert extra["failed_other"] == 0
    assert extra["committed"] == mix.completed_bookings
    assert 0 <= extra["hold_to_commit_conversion"] <= 1
    # The database agrees that nothing committed was lost.
    states = extra["final_states"]
    assert states.get("committed", 0) + states.get("bumped", 0) == extra["committed"]
