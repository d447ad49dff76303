"""An agent's request rate: a token bucket in Redis shared by every process, exact under concurrent
clients, announced in RateLimit-* headers, refusals audited once per window, failing open without Redis."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from agentcal import shared_buckets
from tests.guardrails.helpers import refusals_counted, set_limits, set_workspace_limits
from tests.helpers import Persona, audit_rows, create_calendar, slot


def test_a_burst_passes_then_429_with_a_retry_after_that_is_enough(sdr: Persona) -> None:
    set_limits(sdr, requests_per_second=1, request_burst=2)
    first, second = sdr.client.get("/calendars"), sdr.client.get("/calendars")
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.headers["RateLimit-Limit"] == "2"
    assert (first.headers["RateLimit-Remaining"], second.headers["RateLimit-Remaining"]) == ("1", "0")
    assert first.headers["RateLimit-Policy"] == "2;w=2"
    assert 1 <= int(second.headers["RateLimit-Reset"]) <= 2

    refused = sdr.client.get("/calendars")
    assert refused.status_code == 429
    problem = refused.json()
    assert problem["error"] == "rate_limited" and problem["limit_name"] == "requests"
    assert refused.headers["Retry-After"] == "1" and problem["retry_after"] == 1
    assert refused.headers["RateLimit-Remaining"] == "0"

    time.sleep(int(refused.headers["Retry-After"]))
    assert sdr.client.get("/calendars").status_code == 200, "waiting Retry-After is enough"


def test_concurrent_clients_get_exactly_the_burst(sdr: Persona, live_server: Any) -> None:
    set_limits(sdr, requests_per_second=0.01, request_burst=5)  # no refill within the test

    def call(_: int) -> int:
        with httpx.Client(
            base_url=f"{live_server.url}/v1", headers={"Authorization": f"Bearer {sdr.raw_key}"}
        ) as c:
            return c.get("/calendars").status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = Counter(pool.map(call, range(12)))
    assert statuses == {200: 5, 429: 7}
    # Seven refusals in one window: one audit row, all seven counted.
    rows = audit_rows(agent_public_id=sdr.agent.public_id, failure_reason="rate_limited")
    assert len(rows) == 1 and rows[0].details["limit"] == "requests"
    assert refusals_counted(sdr, "requests") == 7


def test_the_workspace_default_applies_and_an_agents_own_limit_wins(make_agent: Any) -> None:
    first, second = make_agent("first"), make_agent("second")
    workspace = first.agent.workspace
    set_workspace_limits(workspace, requests_per_second=0.01, request_burst=1)
    set_limits(second, request_burst=3)
    assert first.client.get("/me").status_code == 200
    assert first.client.get("/me").status_code == 429
    limits = [second.client.get("/me").json()["limits"] for _ in range(3)]
    assert limits[0] == {
        "requests_per_second": 0.01,
        "request_burst": 3,
        "live_holds": 100,
        "bookings_per_day": 2000,
        "searches_per_minute": 60,
    }
    assert second.client.get("/me").status_code == 429


def test_searches_have_their_own_bucket(sdr: Persona) -> None:
    set_limits(sdr, searches_per_minute=2)
    calendar = create_calendar(sdr)
    query = {"calendars": [calendar["id"]], "duration_minutes": 30, **_window()}
    started = time.monotonic()
    assert [sdr.client.post("/availability/search", json=query).status_code for _ in range(2)] == [200, 200]
    refused = sdr.client.post("/availability/search", json=query)
    assert refused.status_code == 429 and refused.json()["limit_name"] == "searches"
    # The searches bucket's wait (a search every 30 s), less what refilled while the searches ran (they take
    # seconds on a slow machine); not the request bucket's.
    spent = time.monotonic() - started
    assert 30 - spent - 1 <= int(refused.headers["Retry-After"]) <= 30
    # Other requests still pass: the request bucket was not spent by the refusal either.
    assert sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30)).status_code == 201


def _window() -> dict[str, str]:
    from datetime import UTC, datetime, timedelta

    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    return {"start": start.isoformat(), "end": (start + timedelta(days=2)).isoformat()}


@pytest.fixture
def redis_away(settings: Any) -> Any:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    shared_buckets.reset()
    yield
    shared_buckets.reset()


def test_without_redis_requests_are_served_and_the_metric_says_so(sdr: Persona, redis_away: Any) -> None:
    set_limits(sdr, requests_per_second=0.01, request_burst=1)
    before = REGISTRY.get_sample_value("agentcal_rate_limit_failed_open_total") or 0.0
    started = time.monotonic()
    answers = [sdr.client.get("/calendars") for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5, "a limit never turns a Redis outage into an outage"
    assert "RateLimit-Remaining" not in answers[0].headers  # nothing known, nothing claimed
    assert (REGISTRY.get_sample_value("agentcal_rate_limit_failed_open_total") or 0.0) - before == 5
    assert time.monotonic() - started < 5, (
        "after a failure Redis is left alone for a while, not retried each time"
    )


def test_a_redis_that_forgot_the_script_still_counts(sdr: Persona, settings: Any) -> None:
    """A restarted Redis (or SCRIPT FLUSH) has no cached script: the check sends its text, not a failure."""
    import redis

    set_limits(sdr, requests_per_second=0.01, request_burst=3)
    before = REGISTRY.get_sample_value("agentcal_rate_limit_failed_open_total") or 0.0
    assert sdr.client.get("/calendars").headers["RateLimit-Remaining"] == "2"
    redis.Redis.from_url(settings.REDIS_URL).script_flush()
    assert sdr.client.get("/calendars").headers["RateLimit-Remaining"] == "1"
    assert (REGISTRY.get_sample_value("agentcal_rate_limit_failed_open_total") or 0.0) == before


def test_threads_that_come_and_go_never_run_out_of_connections() -> None:
    """A server that starts a thread per request (or replaces its threads) gives each its connection:
    more threads than any connection pool's limit still get answers, not a failed-open check."""
    import threading

    bucket = shared_buckets.Bucket("agt_threads:requests", 1000.0, 1000)
    decisions: list[shared_buckets.Decision] = []
    for _ in range(150):
        thread = threading.Thread(
            target=lambda: decisions.append(shared_buckets.take([bucket], window_seconds=60))
        )
        thread.start()
        thread.join()
    assert [d.failed_open for d in decisions] == [False] * 150


def test_a_refused_key_is_refused_again_at_once_but_not_a_forged_one_with_its_prefix(
    sdr: Persona, anonymous: httpx.Client
) -> None:
    set_limits(sdr, requests_per_second=0.01, request_burst=1)
    assert sdr.client.get("/calendars").status_code == 200
    assert sdr.client.get("/calendars").status_code == 429
    again = sdr.client.get("/calendars")  # refused by the first middleware, from memory
    assert again.status_code == 429 and again.json()["limit_name"] == "requests"
    assert again.headers["RateLimit-Remaining"] == "0" and int(again.headers["Retry-After"]) >= 1
    assert again.headers["X-Request-ID"]
    forged = sdr.raw_key[:-4] + ("AAAA" if not sdr.raw_key.endswith("AAAA") else "BBBB")
    answer = anonymous.get("/calendars", headers={"Authorization": f"Bearer {forged}"})
    assert answer.status_code == 401, "the prefix alone is not the key"
    assert refusals_counted(sdr, "requests") == 2
