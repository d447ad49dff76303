"""A person's own CalDAV calendar (a real Radicale server) blocks agents: events they add, move,
delete and make recurring on "their phone" are enforced by the same locked write that checks
reservations, after one sync."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from bookings.models import BusyBlock
from sync.ingest import ingestion_replay
from sync.models import Connection, IngestionRecord, RecordKind, UpstreamEvent
from sync.services import connection_sync
from tests.helpers import Persona, iso
from tests.sync.linking import Linked, blocks_of, hour, phone_event, span, synced, upstream_busy


def test_an_event_the_person_adds_blocks_holds_until_moved_or_deleted(linked: Linked, sdr: Persona) -> None:
    start = hour(30)
    linked.human.put("dentist.ics", phone_event("dentist-1", start, 60))
    synced(linked)

    busy = upstream_busy(sdr, linked.calendar_id, start - timedelta(hours=1), start + timedelta(hours=2))
    assert [(b["start_time"], b["end_time"], b["source"], b["status"]) for b in busy] == [
        (iso(start), iso(start + timedelta(hours=1)), "caldav", "busy")
    ]
    assert busy[0]["priority"] is None and busy[0]["agent_id"] is None

    refused = sdr.client.post(
        f"/calendars/{linked.calendar_id}/holds", json=span(start + timedelta(minutes=30))
    )
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["error"] == "slot_conflict"
    assert problem["held_by_priority"] is None
    assert problem["conflicting"]["source"] == "caldav"
    assert problem["conflicting"]["start_time"] == iso(start)
    assert problem["alternatives"], "a refusal offers free spans"
    for alternative in problem["alternatives"]:
        alt_start = datetime.fromisoformat(alternative["start_time"])
        alt_end = datetime.fromisoformat(alternative["end_time"])
        assert alt_end <= start or alt_start >= start + timedelta(hours=1), (
            "alternatives avoid upstream busy time"
        )

    # A higher priority changes nothing: upstream time is like a frozen booking.
    boss = sdr.client.post(f"/calendars/{linked.calendar_id}/holds", json={**span(start), "priority": 200})
    assert boss.status_code == 409

    # Moved on the phone: the old span frees up, the new one blocks.
    moved = start + timedelta(hours=3)
    linked.human.put("dentist.ics", phone_event("dentist-1", moved, 60, sequence=1))
    synced(linked)
    assert sdr.client.post(f"/calendars/{linked.calendar_id}/holds", json=span(start)).status_code == 201
    assert sdr.client.post(f"/calendars/{linked.calendar_id}/commits", json=span(moved)).status_code == 409

    # Deleted on the phone: free.
    linked.human.delete("dentist.ics")
    synced(linked)
    assert upstream_busy(sdr, linked.calendar_id, start, moved + timedelta(hours=2)) == []
    assert sdr.client.post(f"/calendars/{linked.calendar_id}/commits", json=span(moved)).status_code == 201


WEEKLY_ACROSS_DST = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Phone//Calendar//EN\r
BEGIN:VTIMEZONE\r
TZID:Europe/Berlin\r
BEGIN:DAYLIGHT\r
TZOFFSETFROM:+0100\r
TZOFFSETTO:+0200\r
TZNAME:CEST\r
DTSTART:19700329T020000\r
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU\r
END:DAYLIGHT\r
BEGIN:STANDARD\r
TZOFFSETFROM:+0200\r
TZOFFSETTO:+0100\r
TZNAME:CET\r
DTSTART:19701025T030000\r
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU\r
END:STANDARD\r
END:VTIMEZONE\r
BEGIN:VEVENT\r
UID:weekly-standup\r
DTSTAMP:20261201T000000Z\r
DTSTART;TZID=Europe/Berlin:20270301T100000\r
DTEND;TZID=Europe/Berlin:20270301T103000\r
RRULE:FREQ=WEEKLY;COUNT=7\r
EXDATE;TZID=Europe/Berlin:20270315T100000\r
SUMMARY:Standup\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:weekly-standup\r
DTSTAMP:20261201T000000Z\r
RECURRENCE-ID;TZID=Europe/Berlin:20270322T100000\r
DTSTART;TZID=Europe/Berlin:20270323T140000\r
DTEND;TZID=Europe/Berlin:20270323T143000\r
SUMMARY:Standup (moved)\r
END:VEVENT\r
END:VCALENDAR\r
"""


def test_a_weekly_series_blocks_exactly_its_instances_across_the_dst_change(
    linked: Linked, sdr: Persona
) -> None:
    linked.human.put("standup.ics", WEEKLY_ACROSS_DST)
    synced(linked)

    def utc(month: int, day: int, hour: int) -> datetime:
        return datetime(2027, month, day, hour, 0, tzinfo=UTC)

    # 10:00 Berlin is 09:00Z in winter and 08:00Z from 28 March; 15 March is excluded; 22 March moved
    # to 23 March 14:00 (13:00Z).
    expected_starts = [utc(3, 1, 9), utc(3, 8, 9), utc(3, 23, 13), utc(3, 29, 8), utc(4, 5, 8), utc(4, 12, 8)]
    busy = upstream_busy(sdr, linked.calendar_id, utc(2, 25, 0), utc(4, 25, 0))
    assert [b["start_time"] for b in busy] == [iso(s) for s in expected_starts]
    assert all(
        datetime.fromisoformat(b["end_time"]) - datetime.fromisoformat(b["start_time"])
        == timedelta(minutes=30)
        for b in busy
    )

    holds = f"/calendars/{linked.calendar_id}/holds"
    assert sdr.client.post(holds, json=span(utc(3, 15, 9))).status_code == 201, "the excluded date is free"
    assert sdr.client.post(holds, json=span(utc(3, 22, 9))).status_code == 201, "the moved instance left"
    assert sdr.client.post(holds, json=span(utc(3, 23, 13))).status_code == 409, "…and went here"
    assert sdr.client.post(holds, json=span(utc(3, 29, 8))).status_code == 409, "after DST: 08:00Z"
    assert sdr.client.post(holds, json=span(utc(3, 29, 9))).status_code == 201, "not 09:00Z"


def test_free_and_all_day_events(linked: Linked, sdr: Persona) -> None:
    start = hour(50)
    linked.human.put("free.ics", phone_event("free-1", start, 60, extra="TRANSP:TRANSPARENT\r\n"))
    linked.human.put("cancelled.ics", phone_event("gone-1", start, 60, extra="STATUS:CANCELLED\r\n"))
    day = (datetime.now(UTC) + timedelta(days=10)).date()
    linked.human.put(
        "holiday.ics",
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Phone//Calendar//EN\r\nBEGIN:VEVENT\r\n"
        f"UID:holiday-1\r\nDTSTAMP:20261201T000000Z\r\nDTSTART;VALUE=DATE:{day:%Y%m%d}\r\n"
        f"DTEND;VALUE=DATE:{day + timedelta(days=1):%Y%m%d}\r\nSUMMARY:Holiday\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n",
    )
    synced(linked)
    assert upstream_busy(sdr, linked.calendar_id, start, start + timedelta(hours=1)) == []
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)  # the calendar's timezone is UTC
    busy = upstream_busy(sdr, linked.calendar_id, midnight - timedelta(days=1), midnight + timedelta(days=2))
    assert [(b["start_time"], b["end_time"]) for b in busy] == [
        (iso(midnight), iso(midnight + timedelta(days=1)))
    ]


def test_a_stale_sync_token_triggers_a_full_resync_that_misses_nothing(linked: Linked, sdr: Persona) -> None:
    first, second = hour(40), hour(44)
    linked.human.put("a.ics", phone_event("a", first))
    synced(linked)
    connection = linked.connection
    connection.sync_token = connection.sync_token + "-forgotten-by-the-server"
    connection.save(update_fields=["sync_token"])
    # While our token is no good, the person deletes one event and adds another.
    linked.human.delete("a.ics")
    linked.human.put("b.ics", phone_event("b", second))
    synced(linked)

    busy = upstream_busy(sdr, linked.calendar_id, first - timedelta(hours=1), second + timedelta(hours=1))
    assert [b["start_time"] for b in busy] == [iso(second)]
    assert IngestionRecord.objects.filter(connection_id=linked.pk, kind=RecordKind.SNAPSHOT).count() == 2
    assert linked.connection.sync_token.startswith("http"), "a fresh token from the server was stored"


def test_blocks_rebuild_identically_from_the_log(linked: Linked, sdr: Persona) -> None:
    linked.human.put("one.ics", phone_event("one", hour(30)))
    linked.human.put("two.ics", phone_event("two", hour(32), 90))
    linked.human.put("standup.ics", WEEKLY_ACROSS_DST)
    synced(linked)
    linked.human.put("two.ics", phone_event("two", hour(35), 90, sequence=1))
    linked.human.delete("one.ics")
    synced(linked)
    before = blocks_of(linked.pk)
    assert len(before) == 7  # two.ics once, the series six times

    BusyBlock.objects.filter(connection_id=linked.pk).delete()
    processed = ingestion_replay(linked.pk)

    assert (
        processed is not None
        and processed.records == IngestionRecord.objects.filter(connection_id=linked.pk).count()
    )
    assert blocks_of(linked.pk) == before


def test_every_raw_payload_is_logged_with_its_version_markers(linked: Linked) -> None:
    linked.human.put("x.ics", phone_event("x-uid", hour(30), sequence=3))
    synced(linked)
    linked.human.delete("x.ics")
    synced(linked)
    records = list(IngestionRecord.objects.filter(connection_id=linked.pk).order_by("id"))
    resource = next(r for r in records if r.kind == RecordKind.RESOURCE)
    assert (resource.uid, resource.sequence, resource.provider) == ("x-uid", 3, "caldav")
    assert resource.etag and "BEGIN:VEVENT" in resource.payload and resource.modified is not None
    assert [r.kind for r in records][-1] == RecordKind.DELETED


def test_servers_without_sync_collection_are_followed_by_ctag_and_etags(linked: Linked, sdr: Persona) -> None:
    Connection.objects.filter(pk=linked.pk).update(supports_sync=False)
    first, second = hour(40), hour(44)
    linked.human.put("a.ics", phone_event("a", first))
    linked.human.put("b.ics", phone_event("b", second))
    assert connection_sync(linked.pk).records == 3  # two events and the listing

    assert connection_sync(linked.pk).records == 0, "an unchanged ctag fetches nothing"

    linked.human.delete("a.ics")
    linked.human.put("b.ics", phone_event("b", second + timedelta(hours=1), sequence=1))
    assert connection_sync(linked.pk).records == 2  # only the changed event, and the listing
    busy = upstream_busy(sdr, linked.calendar_id, first - timedelta(hours=1), second + timedelta(hours=3))
    assert [b["start_time"] for b in busy] == [iso(second + timedelta(hours=1))]


def test_minutely_series_sync_in_bounded_time_and_block_their_whole_span(
    linked: Linked, sdr: Persona
) -> None:
    """Twenty series repeating every few minutes: each is too costly to expand, so the sync gives up on
    expanding it early and blocks its whole span instead, and says so on the connection."""
    first = hour(3)
    # Every half hour for ten minutes: free in between, but never expanded. (Radicale refuses an UNTIL
    # that far off; ours is read at the ical level.)
    linked.human.put(
        "every-half-hour.ics",
        phone_event("half-hourly", first, 10, extra="RRULE:FREQ=MINUTELY;INTERVAL=30\r\n"),
    )
    later = first + timedelta(days=150)
    for n in range(19):
        start = later + timedelta(minutes=n)
        linked.human.put(
            f"minutely-{n}.ics", phone_event(f"minutely-{n}", start, 1, extra="RRULE:FREQ=MINUTELY\r\n")
        )

    # The sync runs in this thread: its CPU time is what the expansion cost, however loaded the machine.
    started = time.thread_time()
    synced(linked)
    elapsed = time.thread_time() - started

    assert elapsed < 3.0, f"the sync took {elapsed:.1f} s of CPU"
    hold = f"/calendars/{linked.calendar_id}/holds"
    between = sdr.client.post(hold, json=span(first + timedelta(minutes=12), 10))
    assert between.status_code == 409, "inside the series' span, between occurrences never computed"
    assert between.json()["conflicting"]["source"] == "caldav"
    assert sdr.client.post(hold, json=span(first - timedelta(hours=1))).status_code == 201, "free before it"
    assert sdr.client.post(hold, json=span(later + timedelta(days=3))).status_code == 409
    warned = UpstreamEvent.objects.filter(connection_id=linked.pk).exclude(warning="")
    assert warned.count() == 20 and not warned.exclude(problem="").exists()
    detail = sdr.client.get(f"/connections/{linked.connection_id}").json()
    assert any("blocking its whole span" in entry["error"] for entry in detail["recent_errors"])
