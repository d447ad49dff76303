"""Upstream events landing on what agents hold: holds are evicted with a webhook, bookings are flagged
(never moved or dropped), and a hold racing an ingestion can never win against it."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection as db
from django.db import transaction

from bookings.engine.statements import EXTEND_SQL
from bookings.models import Reservation
from sync.ingest import process_pending
from sync.models import IngestionRecord, RecordKind
from sync.services import connection_sync
from tests.helpers import Persona, audit_rows, overlapping_live_pairs
from tests.sync.linking import (
    Linked,
    append,
    holds_under_blocks,
    hour,
    link,
    phone_event,
    resource,
    span,
    synced,
    unflagged_bookings_under_blocks,
)
from tests.sync.radicale import DEFAULT_PASSWORD, DEFAULT_USER, CalDAVAccount, Human, RadicaleServer
from tests.webhooks.helpers import Receiver, wait_until


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
    synced(linked)

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
    synced(linked)
    assert exec_assistant.client.get(f"/bookings/{booking_id}").json()["upstream_conflict"] is False
    assert len(audit_rows(event_type="calendar.booking.upstream_conflict.resolved")) == 1
    assert len(receiver.of_type("booking.upstream_conflict")) == 1


def test_a_booking_moved_off_an_upstream_event_is_no_longer_flagged(linked: Linked, sdr: Persona) -> None:
    booked_at = hour(34)
    booking = sdr.client.post(f"/calendars/{linked.calendar_id}/commits", json=span(booked_at))
    assert booking.status_code == 201, booking.text
    booking_id = booking.json()["id"]
    linked.human.put("over-booking.ics", phone_event("over-booking", booked_at + timedelta(minutes=15), 60))
    synced(linked)
    assert sdr.client.get(f"/bookings/{booking_id}").json()["upstream_conflict"] is True

    moved = sdr.client.post(f"/bookings/{booking_id}/move", json=span(hour(40)))

    assert moved.status_code == 200, moved.text
    assert moved.json()["upstream_conflict"] is False
    assert sdr.client.get(f"/bookings/{booking_id}").json()["upstream_conflict"] is False
    assert Reservation.objects.get(booking_id=booking_id).upstream_conflict_at is None


@pytest.mark.concurrency
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


@pytest.mark.concurrency
def test_processing_twice_at_once_applies_each_record_once(linked: Linked) -> None:
    linked.human.put("a.ics", phone_event("a", hour(30)))
    from sync.models import Connection
    from sync.providers.registry import provider_for

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


@pytest.mark.concurrency
def test_a_heartbeat_in_flight_cannot_slip_a_hold_under_a_new_block(linked: Linked, sdr: Persona) -> None:
    """The hold looks lapsed to the ingestion's snapshot while a heartbeat that ran just before its
    expiry has not committed yet: the ingestion's row lock waits for the heartbeat, sees the hold live,
    and evicts it."""
    at = hour(30)
    hold = sdr.client.post(f"/calendars/{linked.calendar_id}/holds", json={**span(at), "ttl_seconds": 600})
    assert hold.status_code == 201, hold.text
    hold_id, token = hold.json()["id"], hold.json()["hold_token"]
    Reservation.objects.filter(hold_id=hold_id).update(expires_at=datetime.now(UTC) + timedelta(seconds=1))
    extended, finish = threading.Event(), threading.Event()

    def heartbeat() -> None:
        try:
            with transaction.atomic(), db.cursor() as cursor:
                cursor.execute(EXTEND_SQL, {"ttl": 600, "hold_id": hold_id})
                assert cursor.fetchall(), "live at the heartbeat's clock"
                extended.set()
                finish.wait(10)  # the rest of the heartbeat's transaction
        finally:
            db.close()

    def ingest() -> None:
        try:
            results.append(process_pending(linked.pk))
        finally:
            db.close()

    results: list[Any] = []
    beat = threading.Thread(target=heartbeat)
    beat.start()
    assert extended.wait(5)
    time.sleep(1.2)  # the old expiry has passed; the heartbeat has not committed
    append(linked, resource("/e.ics", phone_event("e", at - timedelta(minutes=10), 60)))
    ingestion = threading.Thread(target=ingest)
    ingestion.start()
    time.sleep(0.5)
    finish.set()
    beat.join()
    ingestion.join()

    assert results[0] is not None and results[0].applied.evicted == [hold_id]
    assert holds_under_blocks() == []
    committed = sdr.client.post(f"/calendars/{linked.calendar_id}/commits", json={"hold_token": token})
    assert committed.status_code != 201 and unflagged_bookings_under_blocks() == []


def test_a_booking_on_two_linked_calendars_is_flagged_per_calendar(
    linked: Linked, sdr: Persona, radicale: RadicaleServer, sync_settings: Any
) -> None:
    account = CalDAVAccount(radicale.new_calendar(), DEFAULT_USER, DEFAULT_PASSWORD)
    bob = Human(account)
    other = link(sdr, account, bob, name="Bob")
    at = hour(30)
    booking = sdr.client.post(
        f"/calendars/{linked.calendar_id}/commits", json={**span(at), "also_calendars": [other.calendar_id]}
    )
    assert booking.status_code == 201, booking.text
    append(linked, resource("/a.ics", phone_event("a", at)))
    process_pending(linked.pk)
    append(other, resource("/b.ics", phone_event("b", at)))
    processed = process_pending(other.pk)
    assert processed is not None and processed.applied.conflicted == [booking.json()["id"]], "B's own"
    append(linked, IngestionRecord(kind=RecordKind.DELETED, resource="/a.ics"))
    process_pending(linked.pk)
    assert unflagged_bookings_under_blocks() == [], "B is still under its block, still flagged"
    assert sdr.client.get(f"/bookings/{booking.json()['id']}").json()["upstream_conflict"] is True
    bob.close()
