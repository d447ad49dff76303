"""Google Calendar, against the fake (tests/sync/google_fake.py, which follows Google's documentation):
OAuth consent with PKCE, delta sync with sync tokens and 410, push channels, writes with our own event
ids, throttling, token refresh and a revoked grant."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
from django.db import connection as db

from agentcal import broker
from agentcal.celery import app as celery_app
from bookings.models import Calendar
from sync.models import Connection, ConnectionStatus, IngestionRecord, RecordKind
from sync.oauth import GoogleApp, pkce_pair
from sync.services import connection_create_oauth, connection_sync
from sync.writeback import write_behind
from tests.helpers import Persona, audit_rows, create_calendar, iso
from tests.sync.google_fake import DEFAULT_ACCOUNT, GoogleFake
from tests.sync.linking import blocks_of, hour, span, sync_now, upstream_busy
from tests.webhooks.helpers import wait_until
from workspaces.actor import Actor

GOOGLE_CALENDAR = "work-calendar"


@dataclass
class GoogleLinked:
    calendar_id: str
    connection_id: str
    pk: int
    fake: GoogleFake


def google_link(persona: Persona, fake: GoogleFake, live_url: str) -> GoogleLinked:
    """Consent on the fake's page (as a browser would), exchange the code with PKCE, link the calendar."""
    fake.add_calendar(DEFAULT_ACCOUNT, GOOGLE_CALENDAR, "Work", primary=True)
    calendar = create_calendar(persona)
    app = GoogleApp()
    verifier, challenge = pkce_pair()
    redirect_uri = f"{live_url}/oauth/google/callback"
    location = fake.consent(
        app.authorization_url(state="s1", code_challenge=challenge, redirect_uri=redirect_uri)
    )
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == ["s1"]
    grant = app.exchange(code=query["code"][0], code_verifier=verifier, redirect_uri=redirect_uri)
    assert [c.id for c in app.calendars(grant.access_token)] == [GOOGLE_CALENDAR]
    model = Calendar.objects.get(public_id=calendar["id"])
    connection = connection_create_oauth(
        actor=Actor(workspace=model.workspace, agent=persona.agent),
        calendar=model,
        provider="google",
        grant=grant,
        remote_calendar_id=GOOGLE_CALENDAR,
        remote_calendar_name="Work",
        account=DEFAULT_ACCOUNT,
    )
    return GoogleLinked(calendar["id"], connection.public_id, connection.pk, fake)


@pytest.fixture
def glinked(sdr: Persona, google_fake: GoogleFake, google_settings: Any, live_server: Any) -> GoogleLinked:
    return google_link(sdr, google_fake, live_server.url)


def timed(start: datetime, minutes: int = 60) -> dict[str, Any]:
    return {
        "start": {"dateTime": iso(start)},
        "end": {"dateTime": iso(start + timedelta(minutes=minutes))},
    }


def synced(linked: GoogleLinked) -> Any:
    """A sync now, in this process (waiting out a Celery worker's run of the same connection)."""
    return sync_now(linked.pk)


def test_an_event_added_in_google_blocks_after_one_sync_and_a_push_channel_opens(
    glinked: GoogleLinked, sdr: Persona
) -> None:
    start = hour(30)
    glinked.fake.human_put(GOOGLE_CALENDAR, {"summary": "Dentist", **timed(start)})
    synced(glinked)
    busy = upstream_busy(sdr, glinked.calendar_id, start - timedelta(hours=1), start + timedelta(hours=2))
    assert [(b["start_time"], b["source"]) for b in busy] == [(iso(start), "google")]
    refused = sdr.client.post(f"/calendars/{glinked.calendar_id}/holds", json=span(start))
    assert refused.status_code == 409 and refused.json()["conflicting"]["source"] == "google"

    connection = Connection.objects.get(pk=glinked.pk)
    assert connection.push_id and connection.push_expires_at is not None
    assert glinked.fake.channels(GOOGLE_CALENDAR) == [connection.push_id]
    # With a live channel, polling is only the fallback.
    assert connection.last_synced_at is not None
    assert connection.next_sync_at - connection.last_synced_at >= timedelta(seconds=900)


def test_a_push_notification_brings_a_change_in_on_a_real_worker(
    glinked: GoogleLinked, sdr: Persona, celery_worker: Any
) -> None:
    synced(glinked)  # the first sync (its message was enqueued before the worker's queue was purged)
    assert Connection.objects.get(pk=glinked.pk).push_id
    start = hour(40)
    glinked.fake.human_put(GOOGLE_CALENDAR, {"summary": "Lunch", **timed(start)})  # Google notifies
    wait_until(lambda: upstream_busy(sdr, glinked.calendar_id, start, start + timedelta(hours=1)), timeout=20)
    connection = Connection.objects.get(pk=glinked.pk)
    assert connection.last_push_at is not None and connection.sync_lag_seconds is not None
    assert connection.sync_lag_seconds < 10


def test_forged_and_duplicated_notifications(glinked: GoogleLinked, live_server: Any) -> None:
    synced(glinked)
    connection = Connection.objects.get(pk=glinked.pk)
    headers = {
        "X-Goog-Channel-ID": connection.push_id,
        "X-Goog-Resource-ID": connection.push_resource_id,
        "X-Goog-Resource-State": "exists",
        "X-Goog-Message-Number": "7",
    }
    forged = httpx.post(
        f"{live_server.url}/hooks/google", headers={**headers, "X-Goog-Channel-Token": "guess"}
    )
    assert forged.status_code == 403
    unknown = httpx.post(f"{live_server.url}/hooks/google", headers={**headers, "X-Goog-Channel-ID": "nope"})
    assert unknown.status_code == 404
    assert len(audit_rows(event_type="sync.push.rejected")) == 2
    assert Connection.objects.get(pk=glinked.pk).last_push_at is None, "a forged push triggers nothing"

    # The fake's own notification, delivered twice: the second sync finds nothing new.
    glinked.fake.human_put(GOOGLE_CALENDAR, {"summary": "Call", **timed(hour(50))})
    before = blocks_of(glinked.pk)
    synced(glinked)
    after_first = blocks_of(glinked.pk)
    records = IngestionRecord.objects.count()
    synced(glinked)
    assert blocks_of(glinked.pk) == after_first != before
    assert IngestionRecord.objects.count() == records, "a repeated sync logs nothing new"


def test_a_410_triggers_a_full_resync_that_converges(glinked: GoogleLinked, sdr: Persona) -> None:
    first = glinked.fake.human_put(GOOGLE_CALENDAR, {"summary": "A", **timed(hour(30))})
    synced(glinked)
    glinked.fake.expire_sync_tokens()
    glinked.fake.human_delete(GOOGLE_CALENDAR, first["id"])
    second = hour(36)
    glinked.fake.human_put(GOOGLE_CALENDAR, {"summary": "B", **timed(second)})
    synced(glinked)
    busy = upstream_busy(sdr, glinked.calendar_id, hour(29), hour(40))
    assert [b["start_time"] for b in busy] == [iso(second)]
    assert IngestionRecord.objects.filter(connection_id=glinked.pk, kind=RecordKind.SNAPSHOT).count() == 2


def test_a_series_with_a_moved_and_a_cancelled_instance(glinked: GoogleLinked, sdr: Persona) -> None:
    start = hour(24 * 3)
    master = glinked.fake.human_put(
        GOOGLE_CALENDAR,
        {
            "summary": "Standup",
            "start": {"dateTime": iso(start), "timeZone": "UTC"},
            "end": {"dateTime": iso(start + timedelta(minutes=30)), "timeZone": "UTC"},
            "recurrence": ["RRULE:FREQ=DAILY;COUNT=4"],
        },
    )
    moved_from, cancelled = start + timedelta(days=1), start + timedelta(days=2)
    glinked.fake.human_put(
        GOOGLE_CALENDAR,
        {
            "recurringEventId": master["id"],
            "originalStartTime": {"dateTime": iso(moved_from), "timeZone": "UTC"},
            **timed(moved_from + timedelta(hours=3), 30),
        },
    )
    glinked.fake.human_put(
        GOOGLE_CALENDAR,
        {
            "recurringEventId": master["id"],
            "originalStartTime": {"dateTime": iso(cancelled), "timeZone": "UTC"},
            "status": "cancelled",
            **timed(cancelled, 30),
        },
    )
    synced(glinked)
    busy = upstream_busy(sdr, glinked.calendar_id, start - timedelta(hours=1), start + timedelta(days=5))
    assert [b["start_time"] for b in busy] == [
        iso(start),
        iso(moved_from + timedelta(hours=3)),
        iso(start + timedelta(days=3)),
    ]


def test_a_booking_is_written_once_under_concurrency_and_its_echo_never_blocks(
    glinked: GoogleLinked, sdr: Persona
) -> None:
    at = hour(30)
    booking = sdr.client.post(f"/calendars/{glinked.calendar_id}/commits", json={**span(at), "title": "Demo"})
    assert booking.status_code == 201
    errors: list[BaseException] = []

    def run() -> None:
        try:
            write_behind(glinked.pk)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    mine = [e for e in glinked.fake.events(GOOGLE_CALENDAR) if e.get("summary") == "Demo"]
    assert len(mine) == 1
    assert mine[0]["extendedProperties"]["private"]["agentcalBooking"] == booking.json()["id"]

    synced(glinked)  # the copy comes back in the delta: recognised, not busy
    assert blocks_of(glinked.pk) == set()

    assert sdr.client.delete(f"/bookings/{booking.json()['id']}").status_code in (200, 204)
    write_behind(glinked.pk)
    assert [e for e in glinked.fake.events(GOOGLE_CALENDAR) if e.get("summary") == "Demo"] == []


def test_throttling_backs_off_without_hammering(glinked: GoogleLinked, sdr: Persona) -> None:
    synced(glinked)
    glinked.fake.fail_next(403, times=2, reason="rateLimitExceeded", path_contains="/events")
    glinked.fake.fail_next(429, times=1, retry_after="30", path_contains="/events")
    listed_before = glinked.fake.count("/events")
    delays = []
    for _ in range(3):
        run = connection_sync(glinked.pk)
        assert run.outcome == "throttled", run
        connection = Connection.objects.get(pk=glinked.pk)
        delays.append(
            (connection.next_sync_at - datetime.now(connection.next_sync_at.tzinfo)).total_seconds()
        )
        assert connection.status == ConnectionStatus.ACTIVE, "a pause, not a failure"
    assert delays[0] < delays[1] and delays[2] >= 29, delays
    synced(glinked)
    assert glinked.fake.count("/events") - listed_before == 4, "three refused listings, then one"
    assert Connection.objects.get(pk=glinked.pk).throttled_count == 3
    detail = sdr.client.get(f"/connections/{glinked.connection_id}").json()
    assert detail["throttled_count"] == 3 and detail["remote_calendar_name"] == "Work"


@pytest.mark.usefixtures("owner")
def test_tokens_are_refreshed_before_they_expire_and_a_revoked_grant_stops_once(
    glinked: GoogleLinked, sdr: Persona, mailoutbox: list[Any]
) -> None:
    synced(glinked)
    # The stored access token is about to expire: the next sync refreshes it first.
    from sync.oauth import Grant, grant_from_secret, seal_grant

    connection = Connection.objects.get(pk=glinked.pk)
    grant = grant_from_secret(connection.secret)
    soon = Grant(
        grant.access_token, grant.refresh_token, datetime.now(grant.expires_at.tzinfo) + timedelta(minutes=1)
    )
    Connection.objects.filter(pk=glinked.pk).update(secret=seal_grant(soon))
    refreshes = glinked.fake.count("/token")
    synced(glinked)
    assert glinked.fake.count("/token") == refreshes + 1
    renewed = grant_from_secret(Connection.objects.get(pk=glinked.pk).secret)
    assert renewed.access_token != grant.access_token and renewed.refresh_token == grant.refresh_token

    assert renewed.refresh_token is not None
    glinked.fake.revoke(renewed.refresh_token)
    Connection.objects.filter(pk=glinked.pk).update(
        secret=seal_grant(Grant(renewed.access_token, renewed.refresh_token, soon.expires_at))
    )
    assert connection_sync(glinked.pk).outcome == "revoked"
    assert connection_sync(glinked.pk).outcome == "revoked"
    connection = Connection.objects.get(pk=glinked.pk)
    assert connection.status == ConnectionStatus.REVOKED and "revoked" in connection.last_error
    assert len(audit_rows(event_type="sync.connection.failed")) == 1, "told once"
    # The owner's email goes out from a worker, once.
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        wait_until(lambda: mailoutbox)
    (message,) = mailoutbox
    assert message.to == ["olivia@acme.test"] and "lost access" in message.subject
    assert f"/calendars/{glinked.calendar_id}" in message.body
    Connection.objects.filter(pk=glinked.pk).update(next_sync_at=datetime.now(connection.next_sync_at.tzinfo))
    from sync.services import connections_due

    assert glinked.pk not in connections_due(), "never retried on its own"


def test_a_channel_is_replaced_before_it_expires_and_polling_covers_no_push(
    glinked: GoogleLinked, settings: Any
) -> None:
    synced(glinked)
    first = Connection.objects.get(pk=glinked.pk).push_id
    # Less than a day left: the next sync opens a new channel and stops the old one.
    Connection.objects.filter(pk=glinked.pk).update(
        push_expires_at=datetime.now(Connection.objects.get(pk=glinked.pk).created_at.tzinfo)
        + timedelta(hours=2)
    )
    synced(glinked)
    second = Connection.objects.get(pk=glinked.pk).push_id
    assert second != first and glinked.fake.channels(GOOGLE_CALENDAR) == [second]

    # Without push (an installation Google cannot reach), the connection is polled more often.
    settings.SYNC_PUSH_ENABLED = False
    Connection.objects.filter(pk=glinked.pk).update(push_id="", push_expires_at=None)
    synced(glinked)
    connection = Connection.objects.get(pk=glinked.pk)
    assert connection.last_synced_at is not None
    interval = connection.next_sync_at - connection.last_synced_at
    assert timedelta(seconds=120) <= interval <= timedelta(seconds=132)


def test_an_access_token_refused_before_its_time_is_refreshed_once(glinked: GoogleLinked) -> None:
    synced(glinked)
    glinked.fake.expire_access_tokens()  # Google stops honouring it early (e.g. the password changed)
    refreshes = glinked.fake.count("/token")
    glinked.fake.human_put(GOOGLE_CALENDAR, {"summary": "Gym", **timed(hour(60))})
    synced(glinked)
    assert glinked.fake.count("/token") == refreshes + 1
    assert len(blocks_of(glinked.pk)) == 1


def test_disconnecting_stops_the_channel_and_removes_our_bookings_only_when_asked(
    glinked: GoogleLinked, sdr: Persona
) -> None:
    booking = sdr.client.post(
        f"/calendars/{glinked.calendar_id}/commits", json={**span(hour(30)), "title": "Demo"}
    )
    assert booking.status_code == 201
    synced(glinked)  # opens the channel and writes the copy
    assert glinked.fake.channels(GOOGLE_CALENDAR) and _copies(glinked) == ["Demo"]

    assert sdr.client.delete(f"/connections/{glinked.connection_id}?remove_bookings=true").status_code == 204
    assert glinked.fake.channels(GOOGLE_CALENDAR) == [], "no more notifications for a link that is gone"
    assert _copies(glinked) == []
    (row,) = audit_rows(event_type="sync.connection.deleted")
    assert row.details["push_stopped"] is True and row.details["bookings_removed"] == 1


def test_by_default_disconnecting_leaves_our_bookings_in_the_persons_calendar(
    sdr: Persona, google_fake: GoogleFake, google_settings: Any, live_server: Any
) -> None:
    linked = google_link(sdr, google_fake, live_server.url)
    sdr.client.post(f"/calendars/{linked.calendar_id}/commits", json={**span(hour(30)), "title": "Demo"})
    synced(linked)
    assert sdr.client.delete(f"/connections/{linked.connection_id}").status_code == 204
    assert _copies(linked) == ["Demo"]
    refused = sdr.client.delete(f"/connections/{linked.connection_id}?remove_bookings=maybe")
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_request"


def _copies(linked: GoogleLinked) -> list[str]:
    return [e.get("summary", "") for e in linked.fake.events(GOOGLE_CALENDAR) if e.get("extendedProperties")]


def test_push_that_cannot_be_set_up_is_not_retried_on_every_sync(glinked: GoogleLinked, sdr: Persona) -> None:
    glinked.fake.fail_next(500, times=5, path_contains="/watch")
    synced(glinked)
    connection = Connection.objects.get(pk=glinked.pk)
    assert not connection.push_expires_at and connection.push_retry_at is not None
    assert "Push notifications could not be set up" in connection.recent_errors[0]["error"]
    watches = glinked.fake.count("/watch")
    synced(glinked)
    assert glinked.fake.count("/watch") == watches, "polling carries on alone for a while"
    detail = sdr.client.get(f"/connections/{glinked.connection_id}").json()
    assert (
        detail["recent_errors"][0]["error"].startswith("Push notifications")
        and detail["push_expires_at"] is None
    )


def test_with_push_off_a_change_arrives_by_the_schedule_on_a_real_worker(
    glinked: GoogleLinked, sdr: Persona, settings: Any, celery_worker: Any
) -> None:
    settings.SYNC_PUSH_ENABLED = False
    synced(glinked)
    start = hour(45)
    glinked.fake.human_put(GOOGLE_CALENDAR, {"summary": "Offsite", **timed(start)})
    assert not upstream_busy(sdr, glinked.calendar_id, start, start + timedelta(hours=1))
    # The polling interval has passed: beat's scheduler finds the connection due.
    Connection.objects.filter(pk=glinked.pk).update(
        next_sync_at=datetime.now(start.tzinfo) - timedelta(seconds=1)
    )
    from sync.tasks import sync_due

    assert sync_due() == 1
    wait_until(lambda: upstream_busy(sdr, glinked.calendar_id, start, start + timedelta(hours=1)), timeout=20)


def test_a_push_for_a_revoked_link_syncs_nothing_and_refreshes_no_token(
    glinked: GoogleLinked, celery_worker: Any
) -> None:
    synced(glinked)
    # Revoked earlier, with an access token about to expire: any sync would ask Google for a new one first.
    from sync.oauth import Grant, grant_from_secret, seal_grant
    from sync.services import connection_revoked

    connection = Connection.objects.get(pk=glinked.pk)
    grant = grant_from_secret(connection.secret)
    soon = datetime.now(grant.expires_at.tzinfo) + timedelta(minutes=1)
    Connection.objects.filter(pk=glinked.pk).update(
        secret=seal_grant(Grant(grant.access_token, grant.refresh_token, soon))
    )
    connection_revoked(connection, "invalid_grant")
    assert Connection.objects.get(pk=glinked.pk).push_id, "the channel lives on until it expires"
    ran: list[tuple[str, Any]] = []

    def note(sender: Any = None, task: Any = None, args: Any = None, **kwargs: Any) -> None:
        ran.append((task.name, list(args or ())))

    task_postrun.connect(note, weak=False)
    try:
        token_requests = glinked.fake.count("/token")
        glinked.fake.settle()  # the channel's opening handshake
        delivered = len(glinked.fake.deliveries)
        glinked.fake.notify(GOOGLE_CALENDAR)  # Google's own notification, with the channel's token
        glinked.fake.settle()
        assert [(d.state, d.status) for d in glinked.fake.deliveries[delivered:]] == [("exists", 200)]
        # Whatever the push enqueued is published before the marker and runs before it (one solo worker).
        assert broker.wait_idle(5)
        celery_app.send_task("sync.sync_connection", args=(0,))
        wait_until(lambda: ("sync.sync_connection", [0]) in ran, timeout=20)
    finally:
        task_postrun.disconnect(note)
    assert glinked.fake.count("/token") == token_requests, "Google was not asked for a token"
    assert ("sync.sync_connection", [glinked.pk]) not in ran, "no sync for a revoked link"
    assert Connection.objects.get(pk=glinked.pk).status == ConnectionStatus.REVOKED
