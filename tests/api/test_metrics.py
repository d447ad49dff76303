"""GET /metrics: Prometheus text that moves with real requests, and is not open to everyone."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import create_calendar, slot


def scrape(live_server, **headers) -> dict[tuple[str, tuple], float]:
    response = httpx.get(f"{live_server.url}/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_move_with_real_requests(live_server, sdr, exec_assistant):
    before = scrape(live_server)
    cal = create_calendar(sdr)
    span = slot(hours_ahead=90)
    assert sdr.client.post(f"/calendars/{cal['id']}/holds", json=span).status_code == 201
    assert sdr.client.post(f"/calendars/{cal['id']}/holds", json=span).status_code == 409
    assert exec_assistant.client.post(f"/calendars/{cal['id']}/holds", json=span).status_code == 201  # evicts
    after = scrape(live_server)

    created = {"event_type": "calendar.hold.created", "outcome": "success", "reason": ""}
    assert (
        value(after, "agentcal_events_total", **created) - value(before, "agentcal_events_total", **created)
        == 2
    )
    rejected = {"event_type": "calendar.hold.rejected", "outcome": "rejected", "reason": "slot_conflict"}
    assert (
        value(after, "agentcal_events_total", **rejected) - value(before, "agentcal_events_total", **rejected)
        == 1
    )
    assert value(after, "agentcal_conflicts_total", agent=sdr.id, calendar=cal["id"]) == 1
    assert (
        value(after, "agentcal_preemptions_total", kind="evicted")
        - value(before, "agentcal_preemptions_total", kind="evicted")
        == 1
    )
    assert value(after, "agentcal_write_seconds_count", operation="hold_create") >= 3
    assert ("agentcal_outbox_lag_seconds", ()) in after
    assert ("agentcal_hold_to_commit_conversion_ratio", ()) in after


def test_idempotent_replays_are_counted(live_server, sdr):
    cal = create_calendar(sdr)
    before = value(scrape(live_server), "agentcal_idempotent_replays_total")
    for _ in range(2):
        sdr.client.post(
            f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=91), headers={"Idempotency-Key": "k1"}
        )
    assert value(scrape(live_server), "agentcal_idempotent_replays_total") - before == 1


def test_a_token_protects_the_endpoint_when_configured(live_server, settings):
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert httpx.get(f"{live_server.url}/metrics").status_code == 401
    assert (
        httpx.get(f"{live_server.url}/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    )
    scrape(live_server, Authorization="Bearer s3cret-scrape-token")


def test_without_a_token_only_allowed_addresses_may_scrape(live_server, settings):
    settings.METRICS_ALLOWED_IPS = ["10.9.9.9"]
    assert httpx.get(f"{live_server.url}/metrics").status_code == 403
