"""Processing the ingestion log: stale copies never win, deletions tombstone, the horizon rolls on,
the retention purge keeps what a replay needs, and an upstream event evicts a multi-calendar hold
whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bookings.models import BusyBlock, Reservation
from sync.ingest import ingestion_replay, process_pending
from sync.models import Connection, IngestionRecord, RecordKind, UpstreamEvent
from sync.services import connection_sync, sync_log_purge
from tests.helpers import Persona, create_calendar
from tests.sync.linking import Linked, append, blocks_of, hour, phone_event, resource, span


def test_a_stale_copy_arriving_late_never_overwrites_a_newer_one(linked: Linked) -> None:
    new, old = hour(40), hour(30)
    append(linked, resource("/e.ics", phone_event("e", new, sequence=2)))
    append(linked, resource("/e.ics", phone_event("e", old, sequence=1)))  # delivered out of order
    process_pending(linked.pk)
    assert {(s, e) for s, e, _ in blocks_of(linked.pk)} == {(new, new + timedelta(minutes=30))}
    assert UpstreamEvent.objects.get(resource="/e.ics").sequence == 2


def test_a_deletion_tombstones_and_a_late_copy_cannot_bring_it_back(linked: Linked) -> None:
    at, then = hour(40), datetime.now(UTC) - timedelta(hours=1)
    deleted_version = phone_event("e", at, sequence=3, modified=then)
    append(linked, resource("/e.ics", deleted_version))
    process_pending(linked.pk)
    append(linked, IngestionRecord(kind=RecordKind.DELETED, resource="/e.ics"))
    append(linked, resource("/e.ics", deleted_version))  # the deleted version, delivered late
    append(linked, resource("/e.ics", phone_event("e", at, sequence=2, modified=then - timedelta(hours=1))))
    process_pending(linked.pk)
    assert blocks_of(linked.pk) == set()
    assert UpstreamEvent.objects.get(resource="/e.ics").deleted_at is not None
    # Re-created later (a new life: its SEQUENCE starts again at 0), it blocks again.
    append(linked, resource("/e.ics", phone_event("e", at, sequence=0)))
    process_pending(linked.pk)
    assert len(blocks_of(linked.pk)) == 1


def test_unreadable_data_blocks_nothing_and_says_why(linked: Linked) -> None:
    append(linked, resource("/bad.ics", "BEGIN:VCALENDAR\r\nnot really\r\n"))
    process_pending(linked.pk)
    event = UpstreamEvent.objects.get(resource="/bad.ics")
    assert event.problem and blocks_of(linked.pk) == set()


DAILY = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Phone//Calendar//EN\r\nBEGIN:VEVENT\r\nUID:daily\r\n"
    "DTSTAMP:20261201T000000Z\r\nDTSTART:20261202T120000Z\r\nDTEND:20261202T123000Z\r\n"
    "RRULE:FREQ=DAILY\r\nSUMMARY:Lunch\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


def test_recurring_events_are_expanded_again_as_the_horizon_rolls_on(linked: Linked, settings: Any) -> None:
    settings.SYNC_HORIZON_DAYS = 7
    linked.human.put("lunch.ics", DAILY)
    connection_sync(linked.pk)
    first = BusyBlock.objects.filter(connection_id=linked.pk)
    assert max(b.end_time for b in first) <= datetime.now(UTC) + timedelta(days=8)
    count = first.count()

    settings.SYNC_HORIZON_DAYS = 14  # as if a week had passed: the horizon's end moved on
    connection_sync(linked.pk)
    assert BusyBlock.objects.filter(connection_id=linked.pk).count() == count + 7
    assert Connection.objects.get(pk=linked.pk).expanded_until is not None


def test_the_purge_keeps_what_a_replay_needs(linked: Linked, settings: Any) -> None:
    linked.human.put("a.ics", phone_event("a", hour(30)))
    linked.human.put("b.ics", phone_event("b", hour(32)))
    connection_sync(linked.pk)
    linked.human.put("a.ics", phone_event("a", hour(34), sequence=1))
    linked.human.delete("b.ics")
    connection_sync(linked.pk)
    before = blocks_of(linked.pk)
    total = IngestionRecord.objects.count()

    settings.SYNC_LOG_RETENTION_DAYS = 0  # everything is past retention
    UpstreamEvent.objects.filter(deleted_at__isnull=False).update(
        deleted_at=datetime.now(UTC) - timedelta(days=1)
    )
    purged = sync_log_purge()
    assert 0 < purged < total
    current = UpstreamEvent.objects.get(resource__endswith="a.ics").record_id
    assert current is not None and IngestionRecord.objects.filter(pk=current).exists(), "current data kept"

    BusyBlock.objects.filter(connection_id=linked.pk).delete()
    ingestion_replay(linked.pk)
    assert blocks_of(linked.pk) == before


def test_an_upstream_event_evicts_a_multi_calendar_hold_whole(linked: Linked, sdr: Persona) -> None:
    other = create_calendar(sdr, name="Meeting room")
    at = hour(30)
    hold = sdr.client.post(
        f"/calendars/{linked.calendar_id}/holds",
        json={**span(at), "also_calendars": [other["id"]], "ttl_seconds": 600},
    )
    assert hold.status_code == 201, hold.text
    linked.human.put("e.ics", phone_event("e", at))
    connection_sync(linked.pk)
    rows = Reservation.objects.filter(hold_id=hold.json()["id"])
    assert sorted(r.status for r in rows) == ["evicted", "evicted"], "both calendars' rows, together"
    # The room is free again for someone else.
    assert sdr.client.post(f"/calendars/{other['id']}/commits", json=span(at)).status_code == 201


def test_a_replay_rebuilds_from_nothing(linked: Linked) -> None:
    append(linked, resource("/a.ics", phone_event("a", hour(30))))
    process_pending(linked.pk)
    BusyBlock.objects.create(
        calendar_id=linked.connection.calendar_id,
        source="caldav",
        connection_id=linked.pk,
        event_key="/not-in-the-log.ics",
        start_time=hour(40),
        end_time=hour(41),
    )
    ingestion_replay(linked.pk)
    assert {key for _, _, key in blocks_of(linked.pk)} == {"/a.ics"}
