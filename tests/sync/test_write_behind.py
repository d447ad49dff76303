"""Committed bookings are copied to the person's CalDAV calendar exactly once, kept up to date, removed
on cancel, and their echo never blocks them."""

from __future__ import annotations

import base64
import json
import threading
from datetime import timedelta
from typing import Any

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.db import connection as db

from agentcal import broker
from agentcal.celery import app as celery_app
from sync.models import Connection, ConnectionStatus, UpstreamCopy
from sync.providers import caldav_client as caldav
from sync.providers.errors import PreconditionFailed
from sync.writeback import write_behind
from tests.helpers import Persona, audit_rows
from tests.sync.linking import Linked, blocks_of, hour, link, span, synced, upstream_busy
from tests.sync.radicale import CalDAVAccount, FaultyProxy, Human
from tests.webhooks.helpers import Receiver, wait_until


def commit(persona: Persona, linked: Linked, hours_ahead: int = 30, **extra: Any) -> dict[str, Any]:
    response = persona.client.post(
        f"/calendars/{linked.calendar_id}/commits",
        json={**span(hour(hours_ahead)), "title": "Intro call", **extra},
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_a_booking_is_written_once_even_by_concurrent_runs_and_removed_on_cancel(
    linked: Linked, sdr: Persona
) -> None:
    booking = commit(sdr, linked)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            write_behind(linked.pk)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            db.close()  # this thread's own connection

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    write_behind(linked.pk)  # and once more, as a retry would

    upstream = linked.human.list()
    assert list(upstream) == [f"{booking['id']}.ics"]
    data = upstream[f"{booking['id']}.ics"]
    assert f"UID:{booking['id']}@agentcal" in data and "Intro call" in data
    assert UpstreamCopy.objects.filter(booking_id=booking["id"]).count() == 1

    # The echo comes back on the next sync and is recognised: it blocks nothing, not even others.
    synced(linked)
    assert blocks_of(linked.pk) == set()
    around = (hour(29), hour(32))  # the booking's half hour, and time either side of it
    assert upstream_busy(sdr, linked.calendar_id, *around) == []
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["upstream_conflict"] is False

    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code in (200, 204)
    write_behind(linked.pk)
    assert linked.human.list() == {}
    assert not UpstreamCopy.objects.filter(booking_id=booking["id"]).exists()


def test_a_changed_title_is_rewritten_with_a_higher_sequence(linked: Linked, sdr: Persona) -> None:
    booking = commit(sdr, linked)
    write_behind(linked.pk)
    from bookings.models import Reservation

    Reservation.objects.filter(booking_id=booking["id"]).update(title="Intro call (moved room)")
    done = write_behind(linked.pk)
    assert done.updated == [booking["id"]]
    data = linked.human.get(f"{booking['id']}.ics")
    assert data is not None and "moved room" in data and "SEQUENCE:1" in data


def _queued_write_behind_messages() -> list[list[int]]:
    """The calendar ids of each write-behind message waiting in the broker's queue (read, not taken)."""
    queued = redis.Redis.from_url(celery_app.conf.broker_url).lrange("celery", 0, -1)
    messages = [json.loads(raw) for raw in queued]
    return [
        json.loads(base64.b64decode(m["body"]))[0][0]
        for m in messages
        if m["headers"]["task"] == "sync.write_behind_for_calendars"
    ]


def test_a_burst_of_commits_shares_write_behind_messages_and_every_copy_arrives(
    linked: Linked, sdr: Persona, human: Human, webhook_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with celery_app.connection_for_write() as connection:
        celery_app.amqp.queues["celery"].bind(connection).purge()
    # A burst is what one nudge interval holds: on a loaded machine six holds and commits through HTTP
    # can take longer than the default 0.2 s apiece, and then none would share. Two seconds holds them.
    monkeypatch.setattr(broker, "NUDGE_MIN_INTERVAL_SECONDS", 2.0)
    bookings = [commit(sdr, linked, hours_ahead=30 + i) for i in range(6)]
    assert broker.wait_idle(timeout=10)

    # One message per nudge interval carrying the calendar, not one per write: the burst's first commit
    # goes out at once, the rest ride on the interval's trailing message.
    messages = _queued_write_behind_messages()
    assert 1 <= len(messages) < len(bookings), messages
    assert {calendar for ids in messages for calendar in ids} == {linked.connection.calendar_id}

    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        wanted = {f"{booking['id']}.ics" for booking in bookings}
        wait_until(lambda: wanted <= set(human.list()), timeout=30)
    assert UpstreamCopy.objects.count() == len(bookings)


def test_the_write_task_honours_retry_after_and_still_writes_once(
    sdr: Persona,
    caldav_calendar: CalDAVAccount,
    human: Human,
    sync_settings: Any,
    faulty_proxy: FaultyProxy,
    celery_worker: Any,
) -> None:
    through = CalDAVAccount(
        faulty_proxy.through(caldav_calendar.url), caldav_calendar.username, caldav_calendar.password
    )
    linked = link(sdr, through, human)
    faulty_proxy.fail_next(503, times=2, retry_after="1", methods={"PUT"})
    booking = commit(sdr, linked)  # the commit's signal enqueues the write task on the real worker

    wait_until(lambda: f"{booking['id']}.ics" in human.list(), timeout=20)
    assert list(human.list()) == [f"{booking['id']}.ics"]
    assert faulty_proxy.count("PUT") >= 3, "two refused attempts, then the write"


def test_a_write_that_keeps_failing_surfaces_on_the_connection(
    sdr: Persona,
    caldav_calendar: CalDAVAccount,
    human: Human,
    sync_settings: Any,
    faulty_proxy: FaultyProxy,
    celery_worker: Any,
    receiver: Receiver,
) -> None:
    assert (
        sdr.client.post("/webhook-endpoints", json={"url": receiver.url, "events": ["*"]}).status_code == 201
    )
    through = CalDAVAccount(
        faulty_proxy.through(caldav_calendar.url), caldav_calendar.username, caldav_calendar.password
    )
    linked = link(sdr, through, human)
    faulty_proxy.fail_next(503, times=100, retry_after="0", methods={"PUT"})
    commit(sdr, linked)

    connection = wait_until(
        lambda: Connection.objects.filter(pk=linked.pk, status=ConnectionStatus.FAILING).first(), timeout=30
    )
    assert "503" in connection.last_error
    event = wait_until(lambda: receiver.of_type("connection.failed"), timeout=20)[0].json
    assert event["data"]["connection"]["id"] == linked.connection_id
    assert audit_rows(event_type="sync.connection.failed")
    detail = sdr.client.get(f"/connections/{linked.connection_id}").json()
    assert detail["status"] == "failing" and "503" in detail["last_error"]


def test_put_refuses_a_second_create(caldav_calendar: CalDAVAccount) -> None:
    """The mechanism the once-only guarantee rests on, against the real server."""
    with caldav.CalDAVClient(
        caldav_calendar.url, caldav_calendar.username, caldav_calendar.password
    ) as client:
        client.put("bk_once.ics", _ICS, create_only=True)
        with pytest.raises(PreconditionFailed):
            client.put("bk_once.ics", _ICS, create_only=True)


_ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:bk_once@agentcal\r\n"
    "DTSTAMP:20270101T000000Z\r\nDTSTART:20270101T100000Z\r\nDTEND:20270101T103000Z\r\nEND:VEVENT\r\n"
    "END:VCALENDAR\r\n"
)


def test_a_copy_the_person_moved_blocks_where_they_put_it(
    linked: Linked, sdr: Persona, exec_assistant: Persona
) -> None:
    at, moved = hour(30), hour(36)
    booking = commit(sdr, linked)
    synced(linked)  # writes the copy upstream, and reads its echo back (which blocks nothing)
    name = f"{booking['id']}.ics"
    copy = linked.human.get(name)
    assert copy is not None
    fmt = "%Y%m%dT%H%M%SZ"
    linked.human.put(
        name,
        copy.replace(f"DTSTART:{at:{fmt}}", f"DTSTART:{moved:{fmt}}").replace(
            f"DTEND:{at + timedelta(minutes=30):{fmt}}", f"DTEND:{moved + timedelta(minutes=30):{fmt}}"
        ),
    )
    synced(linked)
    taken = exec_assistant.client.post(f"/calendars/{linked.calendar_id}/commits", json=span(moved))
    assert taken.status_code == 409, "the person's moved copy is their meeting now"
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["upstream_conflict"] is False


def test_a_failing_write_does_not_slow_reading(
    sdr: Persona, caldav_calendar: CalDAVAccount, human: Human, sync_settings: Any, faulty_proxy: FaultyProxy
) -> None:
    through = CalDAVAccount(
        faulty_proxy.through(caldav_calendar.url), caldav_calendar.username, caldav_calendar.password
    )
    linked = link(sdr, through, human)
    faulty_proxy.fail_next(403, times=100, methods={"PUT"})  # a read-only calendar
    commit(sdr, linked)
    for _ in range(3):
        synced(linked)
        connection = Connection.objects.get(pk=linked.pk)
        assert connection.status == ConnectionStatus.FAILING and "403" in connection.last_error
        assert connection.last_synced_at is not None
        assert connection.next_sync_at - connection.last_synced_at <= timedelta(seconds=66), "no backoff"
    assert connection.consecutive_failures == 3
    assert len(audit_rows(event_type="sync.connection.failed")) == 1, "announced once"
