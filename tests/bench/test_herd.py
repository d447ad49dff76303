from __future__ import annotations

import pytest

from bench.runner import Bench
from bench.stats import find
from tests.bench.helpers import tiny

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_gives_each_herd_round_exactly_one_winner() -> None:
    report = Bench(tiny(agents=6, rounds=4)).run()

    herd = find(report.results, "herd", "engine", "in-process")
    assert herd is not None
    assert herd.double_bookings == 0
    assert herd.extra["rounds"] == 4
    assert herd.extra["rounds_with_one_winner"] == 4
    assert herd.successes == 4
    assert herd.conflicts == 4 * 5
    assert herd.errors == 0
    # Losers get a 409 they can act on.
    assert herd.extra["losers_without_alternatives"] == 0
    assert all(o.alternatives > 0 for o in herd.outcomes if o.conflict)


def test_the_naive_baseline_lets_double_bookings_through() -> None:
    """Proves the overlap check can fail: read-then-write with no constraint double-books under a herd.
    A race can be lost by chance, so a few attempts are allowed; each widens the read-write gap."""
    for attempt in range(3):
        report = Bench(
            tiny(agents=8, rounds=5, modes=(), baselines=True, naive_gap_seconds=0.02 * (attempt + 1))
        ).run()
        naive = find(report.results, "herd", "naive", "psycopg")
        assert naive is not None and naive.double_bookings is not None
        if naive.double_bookings > 0:
            break
    else:
        pytest.fail("the naive baseline never double-booked in 3 attempts")
    assert naive.extra["rounds_with_several_winners"] > 0

    # The same race behind an advisory lock per calendar is safe.
    locked = find(report.results, "herd", "advisory_lock", "psycopg")
    assert locked is not None
    assert locked.double_bookings == 0
    assert locked.extra["rounds_with_one_winner"] == locked.extra["rounds"] == 5
