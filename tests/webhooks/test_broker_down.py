"""With the broker down no request waits for it (it takes ~2 s to refuse), and nothing is lost."""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from celery.contrib.testing.worker import start_worker

from agentcal import broker
from agentcal.celery import app as celery_app
from tests.approvals.helpers import created, request_approval
from tests.helpers import create_calendar, slot
from tests.webhooks.helpers import wait_until
from webhooks.models import DeliveryStatus, OutboxEvent, WebhookDelivery
from webhooks.outbox import outbox_dispatch

pytestmark = pytest.mark.slow

HOLDS_PER_RUN = 12
# Agents write now and then, not in one burst: in a burst, nudges after the first are coalesced and ride
# on a later, trailing publish, which would hide a request that publishes (and waits) itself.
PAUSE_BETWEEN_HOLDS_SECONDS = broker.NUDGE_MIN_INTERVAL_SECONDS + 0.05
# A behaviour bound, not a benchmark: before the publisher thread, a write waited ~2000 ms on a dead broker;
# the margin leaves room for a slow request while other test workers load the machine.
ALLOWED_EXTRA_MS = 500


@dataclass
class BrokerSwitch:
    """Points Celery's producer at a closed loopback port (a real, refused connection) and back."""

    real_url: str
    dead_url: str

    def go_down(self) -> None:
        self._point_at(self.dead_url)

    def come_back(self) -> None:
        self._point_at(self.real_url)

    def _point_at(self, url: str) -> None:
        celery_app.conf.broker_url = url
        # What Celery itself does after a fork (Celery._after_fork): drop the cached connection and
        # producer pools, so the next publish builds them from the new URL.
        celery_app._pool = None
        celery_app.amqp._producer_pool = None
        broker.clear_backoff()  # a back-off from the other URL says nothing about this one


@pytest.fixture
def broker_switch() -> Iterator[BrokerSwitch]:
    with socket.socket() as probe:  # a port nothing listens on once the socket is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    switch = BrokerSwitch(real_url=celery_app.conf.broker_url, dead_url=f"redis://127.0.0.1:{port}/0")
    yield switch
    switch.come_back()
    # Before the database is flushed: the thread may still be running a fallback against it.
    assert broker.wait_idle(timeout=20)


def _purge_queue() -> None:
    with celery_app.connection_for_write() as connection:
        celery_app.amqp.queues["celery"].bind(connection).purge()


def _queued_messages() -> int:
    with celery_app.connection_for_write() as connection:
        return celery_app.amqp.queues["celery"].bind(connection).queue_declare(passive=True).message_count


def _timed_holds(persona, calendar_id: str, *, first_hour: int) -> tuple[list[float], list[str]]:
    latencies_ms, hold_ids = [], []
    for i in range(HOLDS_PER_RUN):
        time.sleep(PAUSE_BETWEEN_HOLDS_SECONDS)
        started = time.perf_counter()
        response = persona.client.post(
            f"/calendars/{calendar_id}/holds", json=slot(hours_ahead=first_hour + i)
        )
        latencies_ms.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 201, response.text
        hold_ids.append(response.json()["id"])
    return latencies_ms, hold_ids


def _p95(latencies_ms: list[float]) -> float:
    return statistics.quantiles(latencies_ms, n=20)[-1]


def _pending_events_for(hold_ids: list[str]) -> int:
    return OutboxEvent.objects.filter(
        event_type="hold.created", payload__hold__id__in=hold_ids, dispatched_at__isnull=True
    ).count()


def test_writes_do_not_wait_for_a_dead_broker_and_their_events_go_out_once_it_is_back(
    sdr, calendar, broker_switch
):
    warm_up = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=20))
    assert warm_up.status_code == 201, warm_up.text
    up_ms, _ = _timed_holds(sdr, calendar["id"], first_hour=24)
    assert broker.wait_idle(timeout=10)
    _purge_queue()  # the nudges above; no worker ran to take them

    broker_switch.go_down()
    down_ms, down_hold_ids = _timed_holds(sdr, calendar["id"], first_hour=60)

    print(
        f"\n{HOLDS_PER_RUN} holds each, ms: broker up max {max(up_ms):.1f} p95 {_p95(up_ms):.1f}; "
        f"broker down max {max(down_ms):.1f} p95 {_p95(down_ms):.1f}"
    )
    assert max(down_ms) <= max(up_ms) + ALLOWED_EXTRA_MS, (up_ms, down_ms)
    # The nudge failed in the background (after the requests had answered), and every row is there.
    wait_until(broker.backing_off)
    assert _pending_events_for(down_hold_ids) == HOLDS_PER_RUN

    # The broker is back: the nudge that waited out the back-off goes out, and a worker dispatches the rows.
    broker_switch.come_back()
    assert broker.wait_idle(timeout=5)
    assert _queued_messages() == 1  # the down-run's nudges, coalesced into one
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        wait_until(lambda: _pending_events_for(down_hold_ids) == 0)


@pytest.mark.usefixtures("owner")  # olivia@acme.test, who gets the email
def test_the_approval_email_is_sent_from_the_background_when_the_broker_is_down(
    sdr, mailoutbox, broker_switch
):
    broker_switch.go_down()

    started = time.perf_counter()
    approval = created(request_approval(sdr, summary="Sign the Initech order"))
    elapsed_ms = (time.perf_counter() - started) * 1000

    assert elapsed_ms < 1000, elapsed_ms  # less than half of what the broker takes to refuse
    wait_until(lambda: mailoutbox)
    (message,) = mailoutbox
    assert message.to == ["olivia@acme.test"]
    assert approval["id"] in message.body
    # The email's own publish was refused, or skipped while the nudge's refusal held the broker in back-off.
    assert broker.backing_off()


def test_a_replay_asked_for_while_the_broker_is_down_is_sent_from_the_background(
    sdr, receiver, webhook_settings, broker_switch
):
    sdr.client.post(
        "/webhook-endpoints", json={"url": receiver.url, "events": ["hold.created"]}
    ).raise_for_status()
    cal = create_calendar(sdr)
    broker_switch.go_down()
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=50)).raise_for_status()
    (delivery_pk,) = outbox_dispatch()  # what the catch-up would do: the delivery exists, not yet sent
    delivery = WebhookDelivery.objects.get(pk=delivery_pk)

    started = time.perf_counter()
    replay = sdr.client.post(f"/webhook-deliveries/{delivery.public_id}/replay")
    elapsed_ms = (time.perf_counter() - started) * 1000

    assert replay.status_code == 202, replay.text
    assert elapsed_ms < 1000, elapsed_ms
    (request,) = receiver.wait_for(1)
    assert request.headers["webhook-id"] == delivery.event.public_id
    wait_until(lambda: WebhookDelivery.objects.get(pk=delivery_pk).status == DeliveryStatus.SUCCEEDED)
