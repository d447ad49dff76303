"""The calendar-lock wait as a metric: what a write waited for another write on its calendar, measured by
PostgreSQL in the statement that waited, exported on /metrics (also aggregated over gunicorn's workers)
and shown as p50/p95/p99 on the dashboard's Metrics page."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connections
from django.test import Client

from agentcal.metrics import CALENDAR_LOCK_WAIT_SECONDS, histogram_quantiles, lock_wait_percentiles
from bench.runner import conninfo_for_baselines
from bookings import engine
from tests.accounts.helpers import make_person
from tests.bookings.helpers import half_hour
from tests.helpers import http_client, slot
from tests.helpers import test_database_url as database_url_for_children
from workspaces.actor import Actor
from workspaces.keys import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)


def waits_longer_than(seconds: float) -> float:
    """How many waits this process has observed above `seconds` (a bucket bound)."""
    samples = {
        sample.labels["le"]: sample.value
        for family in CALENDAR_LOCK_WAIT_SECONDS.collect()
        for sample in family.samples
        if sample.name.endswith("_bucket")
    }
    return samples["+Inf"] - samples[str(seconds)]


def test_a_write_that_waits_for_another_records_how_long(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    before = waits_longer_than(0.25)
    result: dict[str, Any] = {}

    with psycopg.connect(conninfo_for_baselines()) as writer_in_flight:
        writer_in_flight.execute(
            "UPDATE bookings_calendar SET version = version + 1 WHERE id = %s", [calendar.pk]
        )

        def hold() -> None:
            try:
                result["group"] = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
            finally:
                connections.close_all()

        thread = threading.Thread(target=hold)
        thread.start()
        time.sleep(0.4)  # the hold waits this long for the writer
        writer_in_flight.commit()
        thread.join()

    assert result["group"].primary.status == "held"
    assert waits_longer_than(0.25) == before + 1


def test_an_uncontended_write_counts_a_wait_of_zero(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    before, above_zero = lock_wait_percentiles(), waits_longer_than(0.0001)

    engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))

    after = lock_wait_percentiles()
    assert after is not None
    assert after["count"] == (before["count"] if before else 0) + 1
    assert waits_longer_than(0.0001) == above_zero  # it landed in the first bucket: no wait


@pytest.mark.parametrize(
    ("cumulative", "expected"),
    [
        # 10 waits under 1 ms, 10 more under 10 ms: the median is 1 ms; p95 is 9/10 into the second bucket.
        ([(0.001, 10), (0.01, 20), (float("inf"), 20)], {0.5: 0.001, 0.95: 0.0091, 0.99: 0.00982}),
        # Past the last bound only "at least that" is known.
        ([(0.001, 1), (10.0, 1), (float("inf"), 3)], {0.5: 10.0, 0.95: 10.0, 0.99: 10.0}),
    ],
)
def test_percentiles_are_interpolated_within_their_bucket(
    cumulative: list[tuple[float, float]], expected: dict[float, float]
) -> None:
    found = histogram_quantiles(cumulative, tuple(expected))
    assert found == pytest.approx(expected)


def test_the_metrics_page_shows_the_percentiles(actor: Actor, client: Client) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
    client.force_login(make_person("olivia@acme.test", workspace_slug="acme"))

    page = client.get("/w/acme/metrics")

    assert page.status_code == 200
    html = page.content.decode()
    section = html[html.index('data-testid="lock-wait"') :]
    for label in ("p50", "p95", "p99"):
        assert f'<div class="label">{label}</div>' in section
    assert page.context["lock_wait"]["count"] >= 1


@pytest.mark.slow
def test_gunicorn_workers_export_one_histogram(actor: Actor, tmp_path: Path, monkeypatch: Any) -> None:
    from bench.server import GunicornServer

    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    assert actor.agent is not None
    _, raw = api_key_create(agent=actor.agent, scopes=["calendars:write", "bookings:write"])
    with GunicornServer(
        "agentcal.wsgi:application",
        workers=2,
        health_path="/v1/health",
        env={"DATABASE_URL": database_url_for_children(), "PROMETHEUS_MULTIPROC_DIR": str(multiproc)},
    ) as url:
        with http_client(f"{url}/v1", headers={"Authorization": f"Bearer {raw}"}) as api:
            calendar = api.post("/calendars", json={"name": "room"}).json()["id"]
            for hours in range(30, 36):
                assert (
                    api.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=hours)).status_code == 201
                )
        with http_client(url) as scraper:
            scraped = scraper.get("/metrics").text

    (count,) = [
        line for line in scraped.splitlines() if line.startswith("agentcal_calendar_lock_wait_seconds_count")
    ]
    assert float(count.split()[-1]) == 6
    # What the dashboard's page computes in a worker reads every worker's file the same way.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(multiproc))
    percentiles = lock_wait_percentiles()
    assert percentiles is not None and percentiles["count"] == 6
