"""Celery beat is kept single by a lease in Redis: a second beat sends nothing while the first lives, and
takes over when it stops (at once) or dies (once the lease lapses). Real Redis, real publishing: what
counts is what reaches the broker's queue."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agentcal.celery import BEAT_LOCK_KEY, SingletonScheduler, app

PROBE_TASK = "agentcal.beat_lock_probe"  # never run: the test reads the queue and empties it
QUEUE = "celery"  # the default queue: a Redis list of the messages


@pytest.fixture
def broker(settings: Any) -> Iterator[redis.Redis]:
    settings.BEAT_LOCK_TTL_SECONDS = 2
    client = redis.Redis.from_url(app.conf.broker_url)
    client.delete(BEAT_LOCK_KEY, QUEUE)
    schedule = app.conf.beat_schedule
    # Only the probe, due every 50 ms: the real entries would wait for their intervals.
    app.conf.beat_schedule = {"probe": {"task": PROBE_TASK, "schedule": 0.05}}
    yield client
    app.conf.beat_schedule = schedule
    client.delete(BEAT_LOCK_KEY, QUEUE)


def probes_sent(client: redis.Redis) -> int:
    messages = [json.loads(raw) for raw in client.lrange(QUEUE, 0, -1)]
    return sum(1 for message in messages if message["headers"]["task"] == PROBE_TASK)


def tick_for(scheduler: SingletonScheduler, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        scheduler.tick()
        time.sleep(0.02)


def test_a_second_beat_sends_nothing_until_the_first_stops_or_dies(
    broker: redis.Redis, tmp_path: Path
) -> None:
    first = SingletonScheduler(app, schedule_filename=str(tmp_path / "first"))
    second = SingletonScheduler(app, schedule_filename=str(tmp_path / "second"))

    tick_for(first, 0.4)
    assert probes_sent(broker) > 0 and first.lock.held

    # The first beat is alive (its lease renewed a moment ago): the second sends nothing, and leaves its
    # schedule file alone. (Counted after the first's last tick, which may itself send a probe.)
    first.tick()
    sent = probes_sent(broker)
    tick_for(second, 0.3)
    assert probes_sent(broker) == sent
    assert not second.lock.held and not list(tmp_path.glob("second*"))

    # A clean stop releases the lease: the next tick of the standby takes over.
    first.close()
    tick_for(second, 0.3)
    assert second.lock.held and probes_sent(broker) > sent

    # A beat that dies (no close, no renewal) blocks a third only until its lease lapses.
    third = SingletonScheduler(app, schedule_filename=str(tmp_path / "third"))
    died_at = time.monotonic()
    third.tick()
    assert not third.lock.held
    while not third.lock.held and time.monotonic() - died_at < 8:
        third.tick()
        time.sleep(0.05)
    assert third.lock.held
    # The 2 s lease: not at once, and not much later (the bound leaves room for a loaded machine).
    assert 1 < time.monotonic() - died_at < 6
    third.close()
    assert broker.get(BEAT_LOCK_KEY) is None


def test_a_beat_makes_the_folder_of_its_schedule_file_when_it_first_sends(
    broker: redis.Redis, tmp_path: Path
) -> None:
    # The settings only name the data folder (loading them creates nothing), so on a fresh machine the
    # folder of CELERY_BEAT_SCHEDULE_FILENAME does not exist yet when beat starts.
    folder = tmp_path / "data"
    beat = SingletonScheduler(app, schedule_filename=str(folder / "celerybeat-schedule"))
    assert not folder.exists()

    tick_for(beat, 0.3)
    beat.close()

    assert probes_sent(broker) > 0
    assert list(folder.glob("celerybeat-schedule*"))
