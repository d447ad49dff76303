"""Scale-out in the harness: several web nodes sharing one database, the big herd, the cost of one
booking, and baselines that prepare nothing when a transaction pooler is in front."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from bench import baselines, starting_code
from bench.config import BIG_HERD, HTTP, NODES_DISJOINT, NODES_HERD
from bench.formatting import fmt_ms
from bench.progress import Progress
from bench.runner import Bench, conninfo_for_baselines
from bench.sections import markdown
from bench.stats import find
from tests.bench.helpers import tiny
from tests.helpers import test_database_url as database_url_for_servers

pytestmark = pytest.mark.django_db(transaction=True)


def servers_on_the_test_database() -> dict[str, str]:
    return {"DATABASE_URL": database_url_for_servers(), "DB_CONN_MAX_AGE": "60"}


def test_two_web_nodes_share_the_herd_and_give_it_one_winner(tmp_path: Path) -> None:
    bench = Bench(
        tiny(
            modes=(HTTP,),
            scenarios=("nodes",),
            nodes=2,
            workers=2,
            agents=6,
            rounds=2,
            concurrency=4,
            duration=0.5,
            server_env=servers_on_the_test_database(),
            log_dir=tmp_path,
        )
    )
    report = bench.run()

    assert len(set(bench.deployment.node_urls)) == 2
    for nodes in (1, 2):
        herd = next(r for r in report.results if r.scenario == NODES_HERD and r.extra["nodes"] == nodes)
        assert herd.double_bookings == 0 and herd.errors == 0
        assert herd.extra["rounds_with_one_winner"] == herd.extra["rounds"] == 2
        disjoint = next(
            r for r in report.results if r.scenario == NODES_DISJOINT and r.extra["nodes"] == nodes
        )
        assert disjoint.double_bookings == 0 and disjoint.errors == 0 and disjoint.completed_bookings > 0
    assert [row["nodes"] for row in report.data["nodes"]] == [1, 2]
    assert report.data["nodes"][0]["disjoint_vs_one_node"] == 1.0
    assert all(row["disjoint_writes_per_second"] > 0 for row in report.data["nodes"])
    assert "**Web nodes**" in markdown(report)
    # Racers alternate between the nodes.
    open_worker = bench.phases.engine_opener(HTTP, ["cal_x"], nodes=2)
    first, second = open_worker(0), open_worker(1)
    urls = {str(w.client.client.base_url) for w in (first, second)}  # type: ignore[attr-defined]
    first.close()
    second.close()
    assert urls == {f"{url}/v1/" for url in bench.deployment.node_urls}


def test_the_big_herd_gives_one_winner_and_is_set_against_b_the_starting_code_and_the_seeds_figure() -> None:
    # Under gunicorn, whose listen backlog holds the racers its two workers have not reached yet (the
    # test live server's queue of 10 would refuse most of them).
    report = Bench(
        tiny(
            modes=(HTTP,),
            scenarios=("herd500",),
            herd_racers=40,
            herd_racers_rounds=2,
            workers=2,
            baselines=True,
            starting_code=True,
            server_env=servers_on_the_test_database(),
        )
    ).run()

    big = find(report.results, BIG_HERD, "engine", HTTP)
    assert big is not None
    assert big.extra["agents"] == 40 and big.attempts == 80
    assert big.double_bookings == 0 and big.errors == 0
    assert big.extra["rounds_with_one_winner"] == big.extra["rounds"] == 2
    assert big.conflicts == 78 and big.extra["losers_without_alternatives"] == 0
    # Where the round's time went: the database runs on this machine, so its CPU is read too.
    assert big.extra["database_cpu_ms_per_attempt"] > 0 and 0 < big.extra["machine_busy_share"] <= 1
    (headline,) = [g for g in report.data["goals"] if g["goal"].startswith("the seed's headline")]
    assert headline["measured"].startswith("40 racers: 2 of 2 rounds with one winner, 0 double bookings")
    # The same racers against (b): the floor of a round on the same cores.
    yardstick = find(report.results, BIG_HERD, "advisory_lock", HTTP)
    assert yardstick is not None and yardstick.attempts == 80 and yardstick.errors == 0
    assert yardstick.double_bookings == 0 and yardstick.extra["rounds_with_one_winner"] == 2
    assert yardstick.extra["web_cpu_ms_per_attempt"] > 0
    assert "**The big herd**" in markdown(report) and "The same racers against (b)" in markdown(report)
    assert "PostgreSQL" in markdown(report).split("**The big herd**")[1].split("\n")[0]
    # The code the request path's cuts started from, raced the same way: the big-herd goal's yardstick.
    start = report.data["starting_code"]["result"]
    assert start["attempts"] == 80 and start["errors"] == 0 and start["double_bookings"] == 0
    assert start["rounds_with_one_winner"] == 2 and start["web_cpu_ms_per_attempt"] > 0
    (goal,) = [g for g in report.data["goals"] if g["goal"].startswith("the big herd's p99 at most half")]
    assert "raced in this run" in goal["goal"] and goal["target"] == "≤ 0.50"
    assert goal["measured"].endswith(f"/ {fmt_ms(start['latency_ms']['p99'])})")
    assert "The starting code (c7b6e03), raced round by round in turn" in markdown(report)
    with psycopg.connect(conninfo_for_baselines(), prepare_threshold=None) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname LIKE '%\\_starting\\_code'")
        assert left.fetchone() == (0,)


def test_a_clone_without_the_starting_commit_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(starting_code, "STARTING_COMMIT", "0" * 40)
    config = tiny(modes=(HTTP,), scenarios=("herd500",), server_env=servers_on_the_test_database())

    with (
        pytest.raises(starting_code.NotRaced) as refused,
        starting_code.starting_code(
            config,
            conninfo=conninfo_for_baselines(),
            agents=2,
            calendar_name="x",
            progress=Progress(enabled=False),
        ),
    ):
        pass

    assert str(refused.value) == f"this clone has no commit {'0' * 40} (a shallow clone, or no git history)"


# PostgreSQL's backend CPU is read from /proc in clock ticks (10 ms): eight bookings (~2 ms of backend CPU
# each) sometimes rounded to none; forty take several ticks.
COST_BOOKINGS = 40


def test_the_cost_probe_counts_round_trips_and_one_lock_turn_per_write() -> None:
    report = Bench(tiny(scenarios=(), cost_bookings=COST_BOOKINGS, duration=0.5)).run()

    cost = report.data["cost"]
    assert cost["bookings"] == COST_BOOKINGS
    # Each write (hold, commit) takes its calendar's lock once: the trace sees every turn.
    assert cost["lock_hold_ms"]["count"] == 2 * COST_BOOKINGS
    assert 0 < cost["lock_hold_ms"]["p50"] < cost["wall_ms_per_booking"]["p50"]
    # At least one round trip per write.
    assert cost["round_trips_per_booking"] >= 2
    # The wait is read from the traced bookings, the wall times from the timed ones before them: on a loaded
    # machine the traced run's mean can exceed the timed run's p99, so the bound is a sanity one.
    assert 0 < cost["postgres_wait_ms_per_booking"] < 1000
    assert cost["app_cpu_ms_per_booking"] > 0
    if not cost["postgres_cpu_note"]:  # PostgreSQL on this machine, no pooler: its backend's CPU is read
        assert cost["postgres_cpu_ms_per_booking"] > 0
    hot = cost["hot_calendar"]
    assert hot["errors"] == 0 and hot["writes"] > 0
    assert cost["calendar_ceiling_writes_per_second"] > 0
    assert "**Cost of one booking**" in markdown(report)


@pytest.mark.parametrize("prepare", [True, False])
def test_baselines_prepare_statements_only_without_a_pooler(prepare: bool) -> None:
    from datetime import UTC, datetime, timedelta

    conninfo, schema = conninfo_for_baselines(), "bench_prepare_test"
    baselines.schema_create(conninfo, schema)
    try:
        store = baselines.BaselineStore(conninfo, schema=schema, prepare=prepare)
        start = datetime(2031, 1, 6, 9, tzinfo=UTC)
        for i in range(6):
            for variant in ("advisory_lock", "guarded"):
                span_start = start + timedelta(hours=i)
                store.reserve(
                    variant,
                    calendar_id=1,
                    start=span_start,
                    end=span_start + timedelta(minutes=30),
                    agent="a",
                )
        prepared = store.conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        store.close()
    finally:
        baselines.schema_drop(conninfo, schema)
    assert prepared is not None
    assert (prepared[0] > 0) is prepare
