"""Sync runs: a worker killed mid-sync loses nothing, one connection never syncs twice at once, the
schedule drives syncs through a real Celery worker, and sync lag is measured."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from django.db import connection as db
from django.db.models.functions import Now

from sync.ical import busy_intervals
from sync.ingest import horizon
from sync.models import Connection, IngestionRecord
from sync.services import connection_sync
from sync.tasks import sync_due
from tests.helpers import test_database_url as child_database_url
from tests.sync.linking import Linked, blocks_of, hour, phone_event, synced
from tests.webhooks.helpers import wait_until

# Runs syncs of one connection back to back until killed (the worker under test).
_SYNC_FOREVER = """
import os, sys
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentcal.settings")
django.setup()
from sync.services import connection_sync
print("ready", flush=True)
while True:
    connection_sync(int(sys.argv[1]))
"""


def expected_spans(linked: Linked) -> set[tuple[Any, Any]]:
    """What the person's calendar says is busy, read straight from the server."""
    window = horizon(datetime.now(UTC))
    found = set()
    for data in linked.human.list().values():
        for interval in busy_intervals(
            data, window_start=window.start, window_end=window.end, calendar_tz="UTC"
        ):
            found.add((interval.start, interval.end))
    return found


def test_killing_the_worker_mid_sync_loses_nothing(linked: Linked, settings: Any) -> None:
    settings.SYNC_LEASE_SECONDS = 1  # so the killed worker's lease lapses quickly
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "SYNC_ALLOW_PRIVATE_TARGETS": "true",
        "SYNC_LEASE_SECONDS": "1",
    }
    rng = random.Random(11)
    slots = [hour(30 + i) for i in range(12)]
    interrupted = 0
    for round_ in range(6):
        worker = subprocess.Popen(
            [sys.executable, "-c", _SYNC_FOREVER, str(linked.pk)], env=env, stdout=subprocess.PIPE
        )
        assert worker.stdout is not None and worker.stdout.readline().strip() == b"ready"
        # The person keeps changing their calendar while the worker syncs.
        for i in range(3):
            name = f"e{rng.randrange(5)}.ics"
            if rng.random() < 0.25:
                linked.human.put(name, phone_event(name, rng.choice(slots)))
                linked.human.delete(name)
            else:
                linked.human.put(name, phone_event(name, rng.choice(slots), 45, sequence=round_ * 3 + i))
        time.sleep(rng.uniform(0.05, 0.4))
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        worker.stdout.close()
        leased = Connection.objects.filter(pk=linked.pk, lease_until__isnull=False).exists()
        interrupted += leased  # killed while holding the lease: mid-sync

    time.sleep(1.1)  # the last killed worker's lease lapses
    synced(linked)
    connection = Connection.objects.get(pk=linked.pk)
    assert (
        connection.processed_through
        == IngestionRecord.objects.filter(connection_id=linked.pk).latest("id").pk
    )
    assert {(start, end) for start, end, _ in blocks_of(linked.pk)} == expected_spans(linked)
    assert interrupted >= 1, "at least one kill landed inside a sync"


def test_one_connection_never_syncs_twice_at_once(linked: Linked) -> None:
    linked.human.put("a.ics", phone_event("a", hour(30)))
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            barrier.wait()
            outcomes.append(connection_sync(linked.pk).outcome)
        finally:
            db.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("synced") >= 1
    assert set(outcomes) <= {"synced", "busy"}
    # Those that ran did so one after another: each fetched after the previous one's token.
    assert IngestionRecord.objects.filter(connection_id=linked.pk, resource__endswith="a.ics").count() == 1


def test_the_schedule_syncs_due_connections_on_a_real_worker(linked: Linked, celery_worker: Any) -> None:
    linked.human.put("a.ics", phone_event("a", hour(30)))
    Connection.objects.filter(pk=linked.pk).update(next_sync_at=Now())
    assert sync_due() >= 1
    synced = wait_until(
        lambda: Connection.objects.filter(pk=linked.pk, status="active", last_synced_at__isnull=False).first()
    )
    interval = synced.next_sync_at - synced.last_synced_at
    assert timedelta(seconds=60) <= interval <= timedelta(seconds=66), "60 s poll plus up to 10 % jitter"
    assert blocks_of(linked.pk), "the worker's sync put the event in force"
    Connection.objects.filter(pk=linked.pk).update(next_sync_at=Now() + timedelta(minutes=5))
    assert sync_due() == 0, "nothing due, nothing enqueued"


def test_sync_lag_is_measured_and_exposed(linked: Linked, sdr: Any, live_server: Any) -> None:
    linked.human.put("a.ics", phone_event("a", hour(30)))
    connection_sync(linked.pk)  # the first sync: old events measure nothing
    assert Connection.objects.get(pk=linked.pk).sync_lag_seconds is None
    linked.human.put("b.ics", phone_event("b", hour(33)))
    connection_sync(linked.pk)
    lag = Connection.objects.get(pk=linked.pk).sync_lag_seconds
    assert lag is not None and 0 <= lag < 10
    assert sdr.client.get(f"/connections/{linked.connection_id}").json()["sync_lag_seconds"] == lag
    metrics = httpx.get(f"{live_server.url}/metrics").text
    assert 'agentcal_sync_lag_seconds_count{provider="caldav"}' in metrics
