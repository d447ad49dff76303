"""Events reach a real receiver through a real Celery worker, signed per Standard Webhooks."""

from __future__ import annotations

import time

import pytest
from standardwebhooks import Webhook

from tests.helpers import create_calendar, slot
from tests.webhooks.helpers import wait_until
from webhooks.models import DeliveryAttempt, DeliveryStatus, OutboxEvent, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.slow


def register(persona, receiver, events):
    response = persona.client.post("/webhook-endpoints", json={"url": receiver.url, "events": events})
    assert response.status_code == 201, response.text
    return response.json()


def test_a_higher_priority_agent_evicting_a_hold_sends_exactly_one_signed_hold_evicted(
    sdr, exec_assistant, receiver, celery_worker
):
    endpoint = register(sdr, receiver, ["hold.evicted"])
    cal = create_calendar(sdr)
    span = slot(hours_ahead=30)
    victim = sdr.client.post(f"/calendars/{cal['id']}/holds", json=span).json()
    evictor = exec_assistant.client.post(f"/calendars/{cal['id']}/holds", json=span)
    assert evictor.status_code == 201

    (request,) = receiver.wait_for(1)
    payload = Webhook(endpoint["secret"]).verify(
        request.body, request.headers
    )  # raises if the signature is bad
    assert payload["type"] == "hold.evicted"
    assert request.headers["webhook-id"] == payload["id"]
    data = payload["data"]
    assert data["hold"]["id"] == victim["id"] and data["hold"]["status"] == "evicted"
    assert data["reason"] == "priority"
    assert data["displaced_by"] == {
        "id": evictor.json()["id"],
        "agent_id": exec_assistant.id,
        "priority": exec_assistant.agent.priority,
    }
    assert 1 <= len(data["alternatives"]) <= 3
    assert all(alt["start_time"] != span["start_time"] for alt in data["alternatives"])

    time.sleep(1.5)  # give a duplicate every chance to arrive
    assert len(receiver.requests) == 1
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.SUCCEEDED and delivery.attempt_count == 1


def test_events_are_filtered_per_endpoint_and_families_match(sdr, receiver, celery_worker):
    register(sdr, receiver, ["booking.*"])
    cal = create_calendar(sdr)
    hold = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=31)).json()
    sdr.client.post(f"/calendars/{cal['id']}/commits", json={"hold_token": hold["hold_token"]})
    (request,) = receiver.wait_for(1)
    assert request.json["type"] == "booking.committed"
    time.sleep(1)
    assert [r.json["type"] for r in receiver.requests] == ["booking.committed"]  # hold.created filtered out


def test_a_receiver_failing_twice_gets_three_attempts_all_recorded(sdr, receiver, celery_worker):
    receiver.statuses = [500, 503]
    register(sdr, receiver, ["hold.created"])
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=32))

    requests = receiver.wait_for(3)
    assert len({r.headers["webhook-id"] for r in requests}) == 1  # the same message, retried
    delivery = wait_until(lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.SUCCEEDED).first())
    attempts = list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("id"))
    assert [a.status_code for a in attempts] == [500, 503, 200]
    assert all(a.latency_ms >= 0 for a in attempts)
    assert delivery.attempt_count == 3


def test_410_gone_disables_the_endpoint_at_once(sdr, receiver, celery_worker):
    receiver.statuses = [410]
    endpoint = register(sdr, receiver, ["*"])
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=33))
    receiver.wait_for(1)
    disabled = wait_until(
        lambda: WebhookEndpoint.objects.filter(public_id=endpoint["id"], disabled_at__isnull=False).first()
    )
    assert "410" in disabled.disabled_reason
    assert sdr.client.get(f"/webhook-endpoints/{endpoint['id']}").json()["status"] == "disabled"
    # Later events are not delivered to it.
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=34))
    time.sleep(1)
    assert len(receiver.requests) == 1


def test_a_redirect_is_a_failure_and_is_not_followed(sdr, receiver, celery_worker, webhook_settings):
    webhook_settings.WEBHOOK_RETRY_SCHEDULE = [0]  # a single attempt
    receiver.statuses = [302]
    register(sdr, receiver, ["hold.created"])
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=35))
    delivery = wait_until(lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.FAILED).first())
    (attempt,) = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.status_code == 302 and attempt.error
    assert len(receiver.requests) == 1


def test_a_delivery_can_be_replayed_by_hand_with_the_same_webhook_id(sdr, receiver, celery_worker):
    endpoint = register(sdr, receiver, ["hold.created"])
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=36))
    (first,) = receiver.wait_for(1)
    # The receiver has the request a moment before the worker records the attempt's outcome.
    deliveries = wait_until(
        lambda: (
            (found := sdr.client.get(f"/webhook-endpoints/{endpoint['id']}/deliveries").json()["results"])
            and found[0]["status"] != "pending"
            and found
        )
    )
    assert len(deliveries) == 1 and deliveries[0]["status"] == "succeeded"

    replay = sdr.client.post(f"/webhook-deliveries/{deliveries[0]['id']}/replay")
    assert replay.status_code == 202
    _, second = receiver.wait_for(2)
    assert second.headers["webhook-id"] == first.headers["webhook-id"]
    assert second.body == first.body
    Webhook(endpoint["secret"]).verify(second.body, second.headers)
    detail = wait_until(
        lambda: (
            (d := sdr.client.get(f"/webhook-deliveries/{deliveries[0]['id']}").json())["attempts"][1:] and d
        )
    )
    assert [a["is_replay"] for a in detail["attempts"]] == [False, True]


def test_the_outbox_listing_shows_the_agents_events_and_their_deliveries(
    sdr, exec_assistant, receiver, celery_worker
):
    register(sdr, receiver, ["hold.*"])
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=37))
    exec_assistant.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=38))
    receiver.wait_for(1)
    events = wait_until(
        lambda: (e := sdr.client.get("/events").json()["results"]) and e[0]["deliveries"] and e
    )
    assert [e["type"] for e in events] == ["hold.created"]  # only sdr's own events
    assert events[0]["deliveries"][0]["status"] in {"pending", "succeeded"}
    assert exec_assistant.client.get("/events").json()["results"][0]["deliveries"] == []
    assert OutboxEvent.objects.count() == 2
