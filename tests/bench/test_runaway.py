"""The runaway scenario: well-behaved agents alone and beside a flooding agent, on sync and gthread
workers, and the per-agent request-rate check on against off."""

from __future__ import annotations

from typing import Any

import pytest

from bench.config import HTTP, RUNAWAY_CALM, RUNAWAY_FLOOD, RUNAWAY_LIMITS_OFF
from bench.goals import goals_table
from bench.runaway_report import runaway_summary
from bench.runner import Bench
from bench.sections import markdown
from bench.stats import Outcome, ScenarioResult
from tests.bench.helpers import tiny
from tests.helpers import test_database_url as database_url_for_servers


@pytest.mark.django_db(transaction=True)
def test_the_flood_runs_beside_the_well_behaved_agents_on_both_kinds_of_worker() -> None:
    report = Bench(
        tiny(
            modes=(HTTP,),
            scenarios=("runaway",),
            workers=2,
            concurrency=2,
            duration=1.0,
            runaway_flood_threads=4,
            # A budget the flood outruns even on a loaded machine (a few requests a second).
            runaway_flood_rate=2.0,
            runaway_flood_burst=4,
            runaway_worker_threads=(1, 2),
            # Redis answers late on a loaded machine, and a check that times out lets the request
            # through (fails open): the budget below holds for checks that were made.
            server_env={
                "DATABASE_URL": database_url_for_servers(),
                "DB_CONN_MAX_AGE": "60",
                "AGENT_RATE_CHECK_TIMEOUT_MS": "5000",
            },
        )
    ).run()

    rows = {(r.scenario, r.variant, r.extra["worker_threads"]): r for r in report.results}
    assert set(rows) == {
        (RUNAWAY_CALM, "engine", 1),
        (RUNAWAY_LIMITS_OFF, "engine", 1),
        (RUNAWAY_FLOOD, "engine", 1),
        (RUNAWAY_FLOOD, "flood", 1),
        (RUNAWAY_CALM, "engine", 2),
        (RUNAWAY_FLOOD, "engine", 2),
        (RUNAWAY_FLOOD, "flood", 2),
    }
    # On, off, off, on: each side is two halves of the duration.
    assert (
        rows[(RUNAWAY_CALM, "engine", 1)].extra["runs"]
        == rows[(RUNAWAY_LIMITS_OFF, "engine", 1)].extra["runs"]
        == 2
    )
    assert rows[(RUNAWAY_LIMITS_OFF, "engine", 1)].extra["rate_check"] is False
    for row in report.results:
        assert row.double_bookings == 0, row.label
        if row.variant == "engine":
            assert row.errors == 0 and row.completed_bookings > 0, row.label
    summary = report.data["runaway"]
    assert [run["workers"] for run in summary["runs"]] == ["sync workers", "gthread ×2"]
    for run in summary["runs"]:
        assert run["flood_requests"] > 0 and run["flood_accepted"] > 0
        assert sum(run["flood_answers"].values()) == run["flood_requests"]
        assert run["throughput_ratio"] > 0 and run["p99_ratio"] > 0
        # The server refuses the flooding agent beyond its budget (its requests past the in-flight cap too,
        # with threads); the others are never refused.
        assert run["flood_accepted"] < run["flood_requests"]
        assert any(answer.startswith("429 rate_limited:requests") for answer in run["flood_answers"])
        assert run["flood_accepted"] <= run["flood_budget"] + 2.0 * 0.5  # half a second of clock skew
    assert summary["rate_check_cost"]["on_writes_per_second"] > 0
    assert summary["rate_check_cost"]["off_writes_per_second"] > 0
    goals = {g["goal"]: g for g in report.data["goals"]}
    assert (
        goals["runaway agent: zero double bookings on the well-behaved and the flooding agents' calendars"][
            "met"
        ]
        is True
    )
    assert any(goal.startswith("per-agent request-rate check") for goal in goals)
    assert sum(goal.startswith("runaway agent (") for goal in goals) == 4
    assert "**A runaway agent**" in markdown(report)


# --- the goals, from constructed results ------------------------------------------------------------------


def well_behaved(scenario: str, *, writes: int, p99_ms: float, threads: int = 1) -> ScenarioResult:
    """`writes` disjoint writes in a second, the slowest 2 % taking `p99_ms`, the others 5 ms."""
    slow = max(writes // 50, 1)
    outcomes = [Outcome("hold", 201, 0.005)] * (writes - slow) + [Outcome("hold", 201, p99_ms / 1000)] * slow
    extra = {"worker_threads": threads, "flood_threads": 16, "flood_limits": {}}
    return ScenarioResult(scenario, "engine", HTTP, outcomes, 1.0, double_bookings=0, extra=extra)


def flood(*, accepted: int, refused: int, limits: dict[str, Any]) -> ScenarioResult:
    outcomes = [Outcome("hold", 201, 0.01)] * accepted
    outcomes += [Outcome("hold", 429, 0.002, code="rate_limited:requests")] * refused
    extra = {"worker_threads": 1, "threads": 16, "flood_limits": limits}
    return ScenarioResult(RUNAWAY_FLOOD, "flood", HTTP, outcomes, 1.0, double_bookings=0, extra=extra)


def verdicts(results: list[ScenarioResult]) -> dict[str, dict[str, Any]]:
    return {g["goal"]: g for g in goals_table(results, [], None) if g["goal"].startswith(("runaway", "per-"))}


def test_a_flood_that_slows_the_others_misses_and_says_what_the_flood_got() -> None:
    limits = {"requests_per_second": 20.0, "request_burst": 40}
    results = [
        well_behaved(RUNAWAY_CALM, writes=400, p99_ms=20.0),
        well_behaved(RUNAWAY_LIMITS_OFF, writes=500, p99_ms=20.0),
        well_behaved(RUNAWAY_FLOOD, writes=200, p99_ms=60.0),
        flood(accepted=900, refused=100, limits=limits),
    ]

    goals = verdicts(results)

    p99 = goals["runaway agent (sync workers): well-behaved p99 beside a flood ≤ 1.5 × alone"]
    assert p99["met"] is False and p99["measured"].startswith("3.00")
    assert "900 of 1,000 requests accepted (its budget 20/s, burst 40: at most 60 in 1.0 s)" in p99["why"]
    assert "429 rate_limited:requests ×100" in p99["why"]
    throughput = goals["runaway agent (sync workers): well-behaved writes/s beside a flood ≥ 0.8 × alone"]
    assert throughput["met"] is False and throughput["measured"].startswith("0.50")
    cost = goals[
        "per-agent request-rate check: HTTP disjoint writes/s with it on ≥ 0.95 × off (sync workers)"
    ]
    assert cost["met"] is False and cost["measured"].startswith("0.80")
    summary = runaway_summary(results)
    assert summary is not None and summary["runs"][0]["flood_budget"] == 60.0


def test_a_flood_held_to_its_budget_meets_the_goals() -> None:
    results = [
        well_behaved(RUNAWAY_CALM, writes=400, p99_ms=20.0),
        well_behaved(RUNAWAY_LIMITS_OFF, writes=410, p99_ms=20.0),
        well_behaved(RUNAWAY_FLOOD, writes=380, p99_ms=24.0),
        flood(accepted=55, refused=5_000, limits={"requests_per_second": 20.0, "request_burst": 40}),
    ]

    goals = verdicts(results)

    assert {name: goal["met"] for name, goal in goals.items()} == {
        "runaway agent (sync workers): well-behaved p99 beside a flood ≤ 1.5 × alone": True,
        "runaway agent (sync workers): well-behaved writes/s beside a flood ≥ 0.8 × alone": True,
        "runaway agent: zero double bookings on the well-behaved and the flooding agents' calendars": True,
        "per-agent request-rate check: HTTP disjoint writes/s with it on ≥ 0.95 × off (sync workers)": True,
    }
    assert all(goal["why"] == "" for goal in goals.values())
