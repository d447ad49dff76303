"""Google Calendar, against the fake (tests/sync/google_fake.py, which follows Google's documentation):
what only Google does: push channels and their notifications, series with moved and cancelled instances,
disconnecting. What every OAuth provider does alike is in test_oauth_providers_contract.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
from celery.signals import task_postrun

from agentcal import broker
from agentcal.celery import app as celery_app
from sync.models import Connection, ConnectionStatus, IngestionRecord
from sync.oauth import Grant, grant_from_secret, seal_grant
from sync.services import connection_revoked
from tests.helpers import Persona, audit_rows, iso
from tests.sync.google_fake import GoogleFake
from tests.sync.linking import blocks_of, hour, span, upstream_busy
from tests.sync.oauth_linking import GOOGLE_CALENDAR, GoogleLinked, google_link, synced
from tests.sync.oauth_linking import google_timed as timed
from tests.webhooks.helpers import wait_until


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
    synced(glinked)
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


def test_a_push_for_a_revoked_link_syncs_nothing_and_refreshes_no_token(
    glinked: GoogleLinked, celery_worker: Any
) -> None:
    synced(glinked)
    # Revoked earlier, with an access token about to expire: any sync would ask Google for a new one first.
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
