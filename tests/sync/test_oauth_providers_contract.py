"""What every OAuth provider does alike, run against Google's fake and Microsoft's (each follows its
provider's documentation): tokens refreshed before they expire and once more when refused early, a
revoked grant that stops the connection once, listings read page by page, a refused sync token answered
with a full resync, deletions, throttling that backs off, bookings written once, polling without push.
What only one provider does is in test_google_sync.py and test_microsoft_sync.py."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import connection as db

from agentcal.celery import app as celery_app
from sync.models import Connection, ConnectionStatus, IngestionRecord, RecordKind, UpstreamEvent
from sync.oauth import Grant, grant_from_secret, seal_grant
from sync.providers.microsoft_client import transaction_id_for
from sync.services import connection_sync, connections_due
from sync.tasks import sync_due
from sync.writeback import write_behind
from tests.helpers import Persona, audit_rows, iso
from tests.sync.google_fake import GoogleFake
from tests.sync.graph_fake import GraphFake
from tests.sync.linking import blocks_of, hour, span, upstream_busy
from tests.sync.oauth_linking import (
    GOOGLE_CALENDAR,
    OUTLOOK_CALENDAR,
    GoogleLinked,
    MicrosoftLinked,
    connection_of,
    google_timed,
    graph_timed,
    synced,
)
from tests.webhooks.helpers import wait_until

LinkedT = TypeVar("LinkedT", GoogleLinked, MicrosoftLinked)


@dataclass
class Upstream(Generic[LinkedT]):
    """One provider's side of a scenario: the linked calendar, and the person editing it there."""

    linked: LinkedT
    provider: str
    remote_name: str  # the calendar's name as the provider lists it
    listing: str  # the path of the provider's event listing
    rotates_refresh_tokens: bool  # Graph answers a refresh with a new refresh token, Google never does

    @property
    def fake(self) -> GoogleFake | GraphFake:
        return self.linked.fake

    @property
    def pk(self) -> int:
        return self.linked.pk

    def put(self, title: str, start: datetime, minutes: int = 60) -> str:
        """An event the person makes in their own calendar; its id there."""
        raise NotImplementedError

    def delete(self, event_id: str) -> None:
        raise NotImplementedError

    def refuse_sync_tokens(self) -> None:
        raise NotImplementedError

    def throttle(self, *, retry_after: str | None = None) -> None:
        """The provider's next listing is refused with its own way of saying "slow down"."""
        raise NotImplementedError

    def copies(self, title: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def names_booking(self, copy: dict[str, Any], booking_id: str) -> bool:
        raise NotImplementedError


class GoogleUpstream(Upstream[GoogleLinked]):
    def put(self, title: str, start: datetime, minutes: int = 60) -> str:
        event = self.linked.fake.human_put(
            GOOGLE_CALENDAR, {"summary": title, **google_timed(start, minutes)}
        )
        return str(event["id"])

    def delete(self, event_id: str) -> None:
        self.linked.fake.human_delete(GOOGLE_CALENDAR, event_id)

    def refuse_sync_tokens(self) -> None:
        self.linked.fake.expire_sync_tokens()  # 410 fullSyncRequired

    def throttle(self, *, retry_after: str | None = None) -> None:
        # guides/errors: 403 rateLimitExceeded and 429 both mean "slow down".
        fake = self.linked.fake
        if retry_after is None:
            fake.fail_next(403, reason="rateLimitExceeded", path_contains=self.listing)
        else:
            fake.fail_next(429, retry_after=retry_after, path_contains=self.listing)

    def copies(self, title: str) -> list[dict[str, Any]]:
        return [e for e in self.linked.fake.events(GOOGLE_CALENDAR) if e.get("summary") == title]

    def names_booking(self, copy: dict[str, Any], booking_id: str) -> bool:
        return bool(copy["extendedProperties"]["private"]["agentcalBooking"] == booking_id)


class MicrosoftUpstream(Upstream[MicrosoftLinked]):
    def put(self, title: str, start: datetime, minutes: int = 60) -> str:
        event = self.linked.fake.human_put(
            OUTLOOK_CALENDAR, {"subject": title, **graph_timed(start, minutes)}
        )
        return str(event["id"])

    def delete(self, event_id: str) -> None:
        self.linked.fake.human_delete(OUTLOOK_CALENDAR, event_id)

    def refuse_sync_tokens(self) -> None:
        self.linked.fake.expire_delta_tokens()  # 410 SyncStateNotFound

    def throttle(self, *, retry_after: str | None = None) -> None:
        self.linked.fake.fail_next(429, retry_after=retry_after, path_contains=self.listing)

    def copies(self, title: str) -> list[dict[str, Any]]:
        return [e for e in self.linked.fake.events(OUTLOOK_CALENDAR) if e.get("subject") == title]

    def names_booking(self, copy: dict[str, Any], booking_id: str) -> bool:
        return (
            copy["transactionId"] == transaction_id_for(booking_id)
            and f"AgentCal booking: {booking_id}" in copy["body"]["content"]
        )


@pytest.fixture(params=["google", "microsoft"])
def upstream(request: pytest.FixtureRequest) -> Upstream[Any]:
    if request.param == "google":
        return GoogleUpstream(request.getfixturevalue("glinked"), "google", "Work", "/events?", False)
    return MicrosoftUpstream(
        request.getfixturevalue("mslinked"), "microsoft", "Calendar", "/calendarView/delta", True
    )


def test_an_event_made_upstream_blocks_and_one_deleted_there_stops_blocking(
    upstream: Upstream[Any], sdr: Persona
) -> None:
    kept, gone = hour(30), hour(33)
    upstream.put("Dentist", kept)
    deleted = upstream.put("Cancelled later", gone)
    synced(upstream.linked)
    busy = upstream_busy(sdr, upstream.linked.calendar_id, hour(29), hour(35))
    assert [(b["start_time"], b["source"]) for b in busy] == [
        (iso(kept), upstream.provider),
        (iso(gone), upstream.provider),
    ]

    upstream.delete(deleted)
    synced(upstream.linked)  # incremental: the deletion comes as one
    busy = upstream_busy(sdr, upstream.linked.calendar_id, hour(29), hour(35))
    assert [b["start_time"] for b in busy] == [iso(kept)]
    logged = IngestionRecord.objects.filter(connection_id=upstream.pk, kind=RecordKind.DELETED)
    assert list(logged.values_list("resource", flat=True)) == [deleted]


def test_a_listing_of_many_pages_is_read_to_its_end_and_its_last_page_marks_the_next(
    upstream: Upstream[Any], sdr: Persona
) -> None:
    upstream.fake.page_size = 2
    starts = [hour(30 + 2 * n) for n in range(5)]
    for n, start in enumerate(starts):
        upstream.put(f"Meeting {n}", start)
    listed = upstream.fake.count(upstream.listing)
    synced(upstream.linked)
    assert upstream.fake.count(upstream.listing) - listed == 3, "five events, two a page"
    busy = upstream_busy(sdr, upstream.linked.calendar_id, hour(29), hour(45))
    assert [b["start_time"] for b in busy] == [iso(start) for start in starts]

    # The marker stored is the last page's: the next sync reads only what changed since, in one page.
    later = hour(50)
    upstream.put("Later", later)
    listed = upstream.fake.count(upstream.listing)
    synced(upstream.linked)
    assert upstream.fake.count(upstream.listing) - listed == 1
    assert len(blocks_of(upstream.pk)) == 6
    assert IngestionRecord.objects.filter(connection_id=upstream.pk, kind=RecordKind.SNAPSHOT).count() == 1


def test_a_refused_sync_token_means_a_full_resync_that_converges(
    upstream: Upstream[Any], sdr: Persona
) -> None:
    first = upstream.put("A", hour(30))
    synced(upstream.linked)
    token = connection_of(upstream.linked).sync_token
    assert token
    upstream.refuse_sync_tokens()
    upstream.delete(first)  # gone while the token was refused: only the full listing's snapshot says so
    second = hour(36)
    upstream.put("B", second)
    synced(upstream.linked)
    busy = upstream_busy(sdr, upstream.linked.calendar_id, hour(29), hour(40))
    assert [b["start_time"] for b in busy] == [iso(second)]
    assert IngestionRecord.objects.filter(connection_id=upstream.pk, kind=RecordKind.SNAPSHOT).count() == 2
    assert connection_of(upstream.linked).sync_token not in ("", token)


def test_throttling_backs_off_then_succeeds_without_hammering(upstream: Upstream[Any], sdr: Persona) -> None:
    synced(upstream.linked)
    upstream.throttle()
    upstream.throttle()
    upstream.throttle(retry_after="30")
    listed_before = upstream.fake.count(upstream.listing)
    delays = []
    for _ in range(3):
        run = connection_sync(upstream.pk)
        assert run.outcome == "throttled", run
        connection = connection_of(upstream.linked)
        delays.append((connection.next_sync_at - datetime.now(UTC)).total_seconds())
        assert connection.status == ConnectionStatus.ACTIVE, "a pause, not a failure"
    assert delays[0] < delays[1] and delays[2] >= 29, delays
    synced(upstream.linked)
    assert upstream.fake.count(upstream.listing) - listed_before == 4, "three refused listings, then one"
    connection = connection_of(upstream.linked)
    assert connection.throttled_count == 3 and connection.throttled_streak == 0
    detail = sdr.client.get(f"/connections/{upstream.linked.connection_id}").json()
    assert detail["throttled_count"] == 3 and detail["remote_calendar_name"] == upstream.remote_name


@pytest.mark.usefixtures("owner")
def test_tokens_are_refreshed_before_they_expire_and_a_revoked_grant_stops_once(
    upstream: Upstream[Any], mailoutbox: list[Any]
) -> None:
    synced(upstream.linked)
    # The stored access token is about to expire: the next sync refreshes it first.
    grant = grant_from_secret(connection_of(upstream.linked).secret)
    soon = Grant(grant.access_token, grant.refresh_token, datetime.now(UTC) + timedelta(minutes=1))
    Connection.objects.filter(pk=upstream.pk).update(secret=seal_grant(soon))
    refreshes = upstream.fake.count("/token")
    synced(upstream.linked)
    assert upstream.fake.count("/token") == refreshes + 1
    renewed = grant_from_secret(connection_of(upstream.linked).secret)
    assert renewed.access_token != grant.access_token and renewed.refresh_token
    assert (renewed.refresh_token != grant.refresh_token) == upstream.rotates_refresh_tokens

    assert renewed.refresh_token is not None
    upstream.fake.revoke(renewed.refresh_token)
    Connection.objects.filter(pk=upstream.pk).update(
        secret=seal_grant(Grant(renewed.access_token, renewed.refresh_token, soon.expires_at))
    )
    assert connection_sync(upstream.pk).outcome == "revoked"
    assert connection_sync(upstream.pk).outcome == "revoked"
    connection = connection_of(upstream.linked)
    assert connection.status == ConnectionStatus.REVOKED and "revoked" in connection.last_error
    assert len(audit_rows(event_type="sync.connection.failed")) == 1, "told once"
    # The owner's email goes out from a worker, once.
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        wait_until(lambda: mailoutbox)
    (message,) = mailoutbox
    assert message.to == ["olivia@acme.test"] and "lost access" in message.subject
    assert f"/calendars/{upstream.linked.calendar_id}" in message.body
    Connection.objects.filter(pk=upstream.pk).update(next_sync_at=datetime.now(UTC))
    assert upstream.pk not in connections_due(), "never retried on its own"


def test_an_access_token_refused_before_its_time_is_refreshed_once(upstream: Upstream[Any]) -> None:
    synced(upstream.linked)
    upstream.fake.expire_access_tokens()  # the provider stops honouring it early (a password changed)
    refreshes = upstream.fake.count("/token")
    upstream.put("Gym", hour(60))
    synced(upstream.linked)
    assert upstream.fake.count("/token") == refreshes + 1
    assert len(blocks_of(upstream.pk)) == 1


def test_a_booking_is_written_once_under_concurrency_and_its_echo_never_blocks(
    upstream: Upstream[Any], sdr: Persona
) -> None:
    at = hour(30)
    calendar_id = upstream.linked.calendar_id
    booking = sdr.client.post(f"/calendars/{calendar_id}/commits", json={**span(at), "title": "Demo"})
    assert booking.status_code == 201
    booking_id = booking.json()["id"]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            write_behind(upstream.pk)
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
    [copy] = upstream.copies("Demo")
    assert upstream.names_booking(copy, booking_id)

    synced(upstream.linked)  # the copy comes back in the listing: recognised, not busy
    assert blocks_of(upstream.pk) == set()
    assert UpstreamEvent.objects.get(connection_id=upstream.pk, resource=copy["id"]).booking_id == booking_id
    other = sdr.client.post(f"/calendars/{calendar_id}/holds", json=span(at + timedelta(hours=1)))
    assert other.status_code == 201, "the calendar around the booking is still free"

    assert sdr.client.delete(f"/bookings/{booking_id}").status_code in (200, 204)
    write_behind(upstream.pk)
    assert upstream.copies("Demo") == []


def test_with_push_off_a_change_arrives_by_the_schedule_on_a_real_worker(
    upstream: Upstream[Any], sdr: Persona, settings: Any, celery_worker: Any
) -> None:
    settings.SYNC_PUSH_ENABLED = False
    synced(upstream.linked)
    assert not connection_of(upstream.linked).push_id
    start = hour(45)
    upstream.put("Offsite", start)
    calendar_id = upstream.linked.calendar_id
    assert not upstream_busy(sdr, calendar_id, start, start + timedelta(hours=1))
    # The polling interval has passed: beat's scheduler finds the connection due.
    Connection.objects.filter(pk=upstream.pk).update(next_sync_at=datetime.now(UTC) - timedelta(seconds=1))
    assert sync_due() == 1
    wait_until(lambda: upstream_busy(sdr, calendar_id, start, start + timedelta(hours=1)), timeout=20)
