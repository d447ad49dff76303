from __future__ import annotations

from typing import Any

import pytest

from bench import baselines
from bench.baseline_wsgi import ENV_CONNINFO, ENV_SCHEMA
from bench.clients import BaselineHttpWorker
from bench.config import HTTP
from bench.runner import Bench, conninfo_for_baselines
from bench.server import GunicornServer
from bench.stats import find
from bookings.spans import Span
from tests.bench.helpers import tiny

pytestmark = pytest.mark.django_db(transaction=True)


def test_http_mode_runs_the_scenarios_through_a_live_server(live_server: Any, baseline_server: str) -> None:
    report = Bench(
        tiny(
            modes=(HTTP,),
            scenarios=("herd", "disjoint"),
            baselines=True,
            server_url=live_server.url,
            baseline_server_url=baseline_server,
            # Fewer "workers" than agents adds the uncongested herd (the live server has no worker limit).
            workers=2,
            # Django's test server handles keep-alive connections slowly (see tests/conftest.py).
            http_headers={"Connection": "close"},
        )
    ).run()

    herd = find(report.results, "herd", "engine", HTTP)
    assert herd is not None
    assert herd.double_bookings == 0
    assert herd.extra["rounds_with_one_winner"] == herd.extra["rounds"] == 3
    assert herd.extra["losers_without_alternatives"] == 0
    uncongested = find(report.results, "herd-uncongested", "engine", HTTP)
    assert uncongested is not None and uncongested.extra["agents"] == 2
    assert uncongested.extra["rounds_with_one_winner"] == 3 and uncongested.double_bookings == 0
    disjoint = find(report.results, "disjoint", "engine", HTTP)
    assert disjoint is not None
    assert disjoint.double_bookings == 0 and disjoint.errors == 0 and disjoint.completed_bookings > 0
    locked = find(report.results, "disjoint", "advisory_lock", HTTP)
    assert locked is not None and locked.errors == 0 and locked.completed_bookings > 0
    assert any(r["engine_mode"] == HTTP and r["baseline_mode"] == HTTP for r in report.data["ratios"])


def test_the_baseline_app_runs_under_gunicorn(transactional_db: None) -> None:
    from datetime import UTC, datetime, timedelta

    conninfo, schema = conninfo_for_baselines(), "bench_gunicorn_test"
    baselines.schema_create(conninfo, schema)
    try:
        env = {ENV_CONNINFO: conninfo, ENV_SCHEMA: schema}
        with GunicornServer("bench.baseline_wsgi:app", workers=2, health_path="/health", env=env) as url:
            worker = BaselineHttpWorker(base_url=url, variant="advisory_lock", calendar_ids=[7], agent="a")
            start = datetime.now(UTC) + timedelta(days=1)
            span = Span(start, start + timedelta(minutes=30))
            first, second = worker.reserve(0, span, commit=True), worker.reserve(0, span, commit=True)
            worker.close()
        assert (first[0].status, second[0].status) == (201, 409)
        assert second[0].conflict
        assert baselines.overlapping_pairs(conninfo, "advisory_lock", [7], schema) == 0
    finally:
        baselines.schema_drop(conninfo, schema)
