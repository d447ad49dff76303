"""The outbox: no event lost while the broker is down, none sent for a rolled-back change."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import transaction

from agentcal import broker
from agentcal.celery import app as celery_app
from agentcal.sealing import seal_secret
from bookings.models import Reservation
from tests.helpers import create_calendar, slot
from tests.webhooks.fixtures import purge_queue
from webhooks.models import EventType, OutboxEvent, WebhookDelivery
from webhooks.outbox import outbox_emit
from webhooks.tasks import catch_up

pytestmark = pytest.mark.slow

UNREACHABLE_BROKER = "redis://127.0.0.1:9/0"  # the discard port: nothing listens there


@pytest.fixture
def broker_outage():
    """Point Celery's producer at a dead address (a real connection failure); yields `restore()`."""
    real_url = celery_app.conf.broker_url

    def point_at(url: str) -> None:
        celery_app.conf.broker_url = url
        # Drop the cached connection and producer pools so they are rebuilt from the new URL.
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    point_at(UNREACHABLE_BROKER)
    yield lambda: point_at(real_url)
    point_at(real_url)
    broker.clear_backoff()  # the outage's back-off must not leak into other tests


def test_state_changes_commit_while_the_broker_is_down_and_catch_up_delivers_each_event_once(
    sdr, exec_assistant, receiver, webhook_settings, broker_outage
):
    sdr.client.post("/webhook-endpoints", json={"url": receiver.url, "events": ["*"]}).raise_for_status()
    cal = create_calendar(sdr)
    held = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=40))
    assert held.status_code == 201  # the failed nudge never fails the request
    committed = sdr.client.post(
        f"/calendars/{cal['id']}/commits", json={"hold_token": held.json()["hold_token"]}
    )
    assert committed.status_code == 201
    other = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=41)).json()
    evicted = exec_assistant.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=41))
    assert evicted.status_code == 201
    assert Reservation.objects.count() == 3

    undispatched = OutboxEvent.objects.filter(dispatched_at__isnull=True, agent=sdr.agent)
    assert sorted(undispatched.values_list("event_type", flat=True)) == sorted(
        ["hold.created", "booking.committed", "hold.created", "hold.evicted"]
    )
    assert receiver.requests == []

    # The broker comes back; the periodic catch-up runs (twice, as beat would) on a real worker, which
    # starts on an empty queue: messages earlier tests left (nudges, retries) are not this test's.
    broker_outage()
    purge_queue(wait_for_publisher=False)  # what the outage held back is this test's: catch-up's job
    with start_worker(celery_app, pool="solo", perform_ping_check=False):
        catch_up.delay()
        catch_up.delay()
        receiver.wait_for(4)
        time.sleep(1.5)  # room for any duplicate
    ids = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(ids) == 4 and set(ids.values()) == {1}, ids
    assert {r.json["type"] for r in receiver.requests} == {
        "hold.created",
        "booking.committed",
        "hold.evicted",
    }
    assert other["id"] in {r.json["data"]["hold"]["id"] for r in receiver.of_type("hold.evicted")}


def test_a_rolled_back_change_leaves_no_outbox_row_and_sends_nothing(sdr, receiver, celery_worker):
    sdr.client.post("/webhook-endpoints", json={"url": receiver.url, "events": ["*"]}).raise_for_status()

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        outbox_emit(
            event_type=EventType.HOLD_CREATED,
            workspace_id=sdr.agent.workspace_id,
            agent_id=sdr.agent.pk,
            data={"hold": {"id": "hld_rolled_back"}},
        )
        raise Boom

    cal = create_calendar(sdr)
    span = slot(hours_ahead=42)
    assert sdr.client.post(f"/calendars/{cal['id']}/commits", json=span).status_code == 201
    rejected = sdr.client.post(f"/calendars/{cal['id']}/holds", json=span)
    assert rejected.status_code == 409

    receiver.wait_for(1)
    time.sleep(1)
    assert [r.json["type"] for r in receiver.requests] == ["booking.committed"]
    assert list(OutboxEvent.objects.values_list("event_type", flat=True)) == ["booking.committed"]
    assert WebhookDelivery.objects.count() == 1


def test_old_dispatched_events_are_purged_but_pending_work_is_kept(sdr, webhook_settings):
    from datetime import timedelta

    from django.utils import timezone

    from webhooks.models import DeliveryStatus, WebhookEndpoint
    from webhooks.outbox import outbox_dispatch, outbox_purge_old

    endpoint = WebhookEndpoint.objects.create(
        agent=sdr.agent, url="http://127.0.0.1:9/h", events=["*"], sealed_secret=seal_secret("whsec_AA==")
    )
    for i in range(3):
        outbox_emit(
            event_type=EventType.HOLD_CREATED,
            workspace_id=sdr.agent.workspace_id,
            agent_id=sdr.agent.pk,
            data={"n": i},
        )
    outbox_dispatch()
    old = timezone.now() - timedelta(days=webhook_settings.OUTBOX_RETENTION_DAYS + 1)
    OutboxEvent.objects.update(dispatched_at=old)
    first, second, third = WebhookDelivery.objects.order_by("id")
    WebhookDelivery.objects.filter(pk__in=[first.pk, second.pk]).update(status=DeliveryStatus.SUCCEEDED)
    # third stays pending: its event must survive the purge

    assert outbox_purge_old() == 2
    assert list(OutboxEvent.objects.values_list("payload__n", flat=True)) == [2]
    assert WebhookDelivery.objects.get().endpoint == endpoint
