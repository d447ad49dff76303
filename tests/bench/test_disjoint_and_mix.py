from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from bench import baselines
from bench.runner import Bench, conninfo_for_baselines
from bench.stats import find
from tests.bench.helpers import tiny

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
    for variant in ("naive", "advisory_lock", "raw_insert", "guarded"):
        baseline = find(report.results, "disjoint", variant, "psycopg")
        assert baseline is not None, variant
        assert baseline.double_bookings == 0
        assert baseline.errors == 0
        assert baseline.completed_bookings == baseline.attempts > 0
    names = {(r["engine_mode"], r["baseline_variant"]) for r in report.data["ratios"]}
    assert {("in-process", "raw_insert"), ("in-process", "advisory_lock"), ("in-process", "guarded")} <= names


def test_baseline_d_writes_the_engines_rows_under_the_engines_constraint() -> None:
    conninfo, schema = conninfo_for_baselines(), "bench_guarded_test"
    baselines.schema_create(conninfo, schema)
    try:
        store = baselines.BaselineStore(conninfo, schema=schema)
        start = datetime(2031, 1, 6, 9, tzinfo=UTC)
        end = start + timedelta(minutes=30)
        assert store.reserve("guarded", calendar_id=3, start=start, end=end, agent="a") == 201
        assert store.reserve("guarded", calendar_id=3, start=start, end=end, agent="b") == 409
        counts = [
            store.conn.execute(f"SELECT count(*) FROM {schema}.{table}").fetchone()  # noqa: S608 — constants
            for table in ("guarded_booking", "guarded_audit", "guarded_outbox")
        ]
        assert counts == [(1,), (1,), (1,)]
        # The copy kept the exclusion constraint: an overlapping live row is refused by the database.
        with pytest.raises(psycopg.errors.ExclusionViolation), store.conn.transaction():
            store.conn.execute(
                f"""INSERT INTO {schema}.guarded_booking (hold_id, calendar_id, agent_id, is_primary, status,
                        priority, start_time, end_time, fencing_token, version, title, attendees, metadata,
                        created_at, expires_at)
                    VALUES ('hld_other', 3, 1, true, 'held', 100, %s, %s, 1, 1, '', '[]', '{{}}', now(),
                            now() + interval '1 hour')""",  # noqa: S608 — schema is this test's constant
                [start + timedelta(minutes=10), end],
            )
        store.close()
    finally:
        baselines.schema_drop(conninfo, schema)


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
