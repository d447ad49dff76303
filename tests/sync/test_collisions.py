"""Upstream events landing on what agents hold: holds are evicted with a webhook, bookings are flagged
(never moved or dropped), and a hold racing an ingestion can never win against it."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta
from typing import Any

from django.db import connection as db

from bookings.models import Reservation
from sync.ingest import process_pending
from sync.services import connection_sync
from tests.conftest import Persona, audit_rows, overlapping_live_pairs
from tests.sync.linking import (
    Linked,
    holds_under_blocks,
    hour,
    phone_event,
    span,
    unflagged_bookings_under_blocks,
)
from tests.webhooks.conftest import Receiver, wait_until


def test_an_upstream_event_evicts_a_hold_and_flags_a_booking(
    linked: Linked,
    sdr: Persona,
    exec_assistant: Persona,
    receiver: Receiver,
    celery_worker: Any,
) -> None:
    for persona in (sdr, exec_assistant):
        assert (
            persona.client.post("/webhook-endpoints", json={"url": receiver.url, "events": ["*"]}).status_code
            == 201
        )
    held_at, booked_at = hour(30), hour(34)
    hold = sdr.client.post(
        f"/calendars/{linked.calendar_id}/holds", json={**span(held_at), "ttl_seconds": 600}
    )
    assert hold.status_code == 201
    booking = exec_assistant.client.post(f"/calendars/{linked.calendar_id}/commits", json=span(booked_at))
    assert booking.status_code == 201
    hold_id, booking_id = hold.json()["id"], booking.json()["id"]

    linked.human.put("over-hold.ics", phone_event("over-hold", held_at - timedelta(minutes=15), 60))
    linked.human.put("over-booking.ics", phone_event("over-booking", booked_at + timedelta(minutes=15), 60))
    assert connection_sync(linked.pk).outcome == "synced"

    evicted = wait_until(lambda: receiver.of_type("hold.evicted"))[0].json["data"]
    assert evicted["hold"]["id"] == hold_id and evicted["hold"]["status"] == "evicted"
    assert evicted["reason"] == "upstream_event" and evicted["upstream"]["source"] == "caldav"
    assert evicted["alternatives"], "the evicted agent is offered free spans"
    conflict = wait_until(lambda: receiver.of_type("booking.upstream_conflict"))[0].json["data"]
    assert conflict["booking"]["id"] == booking_id and conflict["booking"]["upstream_conflict"] is True

    assert sdr.client.get(f"/holds/{hold_id}").json()["status"] == "evicted"
    kept = exec_assistant.client.get(f"/bookings/{booking_id}").json()
    assert kept["status"] == "committed" and kept["upstream_conflict"] is True, "flagged, never dropped"
    assert [r.details["reason"] for r in audit_rows(event_type="calendar.hold.evicted")] == ["upstream_event"]
    assert len(audit_rows(event_type="calendar.booking.upstream_conflict")) == 1

    # Moved away upstream: the flag clears (and is audited); re-syncing changes nothing more.
    linked.human.delete("over-booking.ics")
    assert connection_sync(linked.pk).outcome == "synced"
    assert exec_assistant.client.get(f"/bookings/{booking_id}").json()["upstream_conflict"] is False
    assert len(audit_rows(event_type="calendar.booking.upstream_conflict.resolved")) == 1
    assert len(receiver.of_type("booking.upstream_conflict")) == 1


def test_holds_commits_and_ingestions_racing_on_one_span(
    linked: Linked, make_agent: Any, sdr: Persona
) -> None:
    """Agents hammer a three-hour window with holds and commits while the person keeps adding and
    moving events in it and syncs run back to back. Afterwards no live hold overlaps a busy block,
    and every booking under one is flagged."""
    window_start = hour(48)
    slots = [window_start + timedelta(minutes=30 * i) for i in range(6)]
    agents = [make_agent(f"racer-{i}", priority=100 + i, max_priority=100 + i) for i in range(6)]
    stop = threading.Event()
    outcomes: list[int] = []
    lock = threading.Lock()

    def agent_loop(persona: Persona, seed: int) -> None:
        rng = random.Random(seed)
        client = persona.new_client()
        while not stop.is_set():
            kind = rng.choice(["holds", "commits"])
            body = {**span(rng.choice(slots)), **({"ttl_seconds": 600} if kind == "holds" else {})}
            response = client.post(f"/calendars/{linked.calendar_id}/{kind}", json=body)
            with lock:
                outcomes.append(response.status_code)
        client.close()

    def person_loop() -> None:
        rng = random.Random(7)
        for i in range(8):
            linked.human.put(f"e{i % 4}.ics", phone_event(f"e{i % 4}", rng.choice(slots), 45, sequence=i))
            time.sleep(0.05)

    def sync_loop() -> None:
        try:
            while not stop.is_set():
                connection_sync(linked.pk)
        finally:
            db.close()  # this thread's own connection

    threads = [threading.Thread(target=agent_loop, args=(a, i)) for i, a in enumerate(agents)]
    threads += [threading.Thread(target=sync_loop), threading.Thread(target=sync_loop)]
    for thread in threads:
        thread.start()
    person_loop()
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    connection_sync(linked.pk)

    assert 201 in outcomes and 409 in outcomes, outcomes
    assert holds_under_blocks() == []
    assert unflagged_bookings_under_blocks() == []
    assert overlapping_live_pairs(linked.calendar_id) == []
    flagged = Reservation.objects.filter(upstream_conflict_at__isnull=False, status="committed").count()
    evictions = audit_rows(event_type="calendar.hold.evicted", details__reason="upstream_event")
    print(f"{len(outcomes)} writes, {flagged} bookings flagged, {len(evictions)} holds evicted upstream")


def test_processing_twice_at_once_applies_each_record_once(linked: Linked) -> None:
    linked.human.put("a.ics", phone_event("a", hour(30)))
    from sync.models import Connection
    from sync.providers import provider_for

    connection = Connection.objects.select_related("calendar").get(pk=linked.pk)
    provider_for(connection).fetch(connection)
    results: list[Any] = []

    def process() -> None:
        try:
            results.append(process_pending(linked.pk))
        finally:
            db.close()

    threads = [threading.Thread(target=process) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.records for r in results if r is not None) == [2], "one processor took the records"
