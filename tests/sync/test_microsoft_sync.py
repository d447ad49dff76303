"""Microsoft 365, against the fake (tests/sync/graph_fake.py, which follows Microsoft's documentation):
what only Graph does: what blocks and what does not, the delta window rolling on with the horizon,
subscriptions opened through the validation handshake to our live server, change and lifecycle
notifications, a moved copy. What every OAuth provider does alike is in test_oauth_providers_contract.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from sync.models import Connection, IngestionRecord, RecordKind, UpstreamEvent
from sync.oauth import grant_from_secret
from sync.providers.microsoft_client import GraphCalendarClient
from sync.writeback import write_behind
from tests.helpers import Persona, audit_rows, iso
from tests.sync.linking import blocks_of, hour, span, upstream_busy
from tests.sync.oauth_linking import OUTLOOK_CALENDAR, MicrosoftLinked, connection_of, synced
from tests.sync.oauth_linking import graph_at as at
from tests.sync.oauth_linking import graph_timed as timed
from tests.webhooks.helpers import wait_until


def test_an_event_made_in_outlook_blocks_after_one_sync_and_a_subscription_opens(
    mslinked: MicrosoftLinked, sdr: Persona, live_server: Any
) -> None:
    start = hour(30)
    mslinked.fake.human_put(OUTLOOK_CALENDAR, {"subject": "Dentist", **timed(start)})
    synced(mslinked)
    busy = upstream_busy(sdr, mslinked.calendar_id, start - timedelta(hours=1), start + timedelta(hours=2))
    assert [(b["start_time"], b["end_time"], b["source"]) for b in busy] == [
        (iso(start), iso(start + timedelta(hours=1)), "microsoft")
    ]
    refused = sdr.client.post(f"/calendars/{mslinked.calendar_id}/holds", json=span(start))
    assert refused.status_code == 409 and refused.json()["conflicting"]["source"] == "microsoft"

    # The subscription was created through Graph's validation handshake with both of our endpoints.
    connection = connection_of(mslinked)
    subscription = mslinked.fake.subscription(connection.push_id)
    assert subscription is not None
    assert subscription.resource == f"me/calendars/{OUTLOOK_CALENDAR}/events"
    assert subscription.notification_url == f"{live_server.url}/hooks/microsoft"
    assert subscription.lifecycle_url == f"{live_server.url}/hooks/microsoft/lifecycle"
    validations = [(d.url, d.status) for d in mslinked.fake.deliveries if d.kind == "validation"]
    assert validations == [(subscription.notification_url, 200), (subscription.lifecycle_url, 200)]
    assert connection.push_secret_hash and subscription.client_state
    assert connection.push_expires_at == subscription.expiration
    lifetime = subscription.expiration - datetime.now(UTC)
    assert timedelta(days=2, hours=22) < lifetime <= timedelta(days=3)
    # With a live subscription, polling is only the fallback.
    assert connection.last_synced_at is not None
    assert connection.next_sync_at - connection.last_synced_at >= timedelta(seconds=900)


def test_what_blocks_free_declined_cancelled_all_day_and_a_series(
    mslinked: MicrosoftLinked, sdr: Persona
) -> None:
    base = hour(24 * 4)
    put = mslinked.fake.human_put
    put(OUTLOOK_CALENDAR, {"subject": "Focus", "showAs": "free", **timed(base)})
    put(
        OUTLOOK_CALENDAR,
        {"subject": "Remote", "showAs": "workingElsewhere", **timed(base + timedelta(hours=2))},
    )
    declined = {"response": "declined"}
    put(
        OUTLOOK_CALENDAR,
        {"subject": "Declined", "responseStatus": declined, **timed(base + timedelta(hours=4))},
    )
    put(OUTLOOK_CALENDAR, {"subject": "Called off", "isCancelled": True, **timed(base + timedelta(hours=6))})
    tentative = base + timedelta(hours=8)
    put(OUTLOOK_CALENDAR, {"subject": "Maybe", "showAs": "tentative", **timed(tentative)})
    day = (base + timedelta(days=2)).replace(hour=0)
    all_day = {"isAllDay": True, "start": at(day), "end": at(day + timedelta(days=1))}
    put(OUTLOOK_CALENDAR, {"subject": "Offsite", **all_day})
    series_start = base + timedelta(days=5)
    master = put(
        OUTLOOK_CALENDAR,
        {
            "subject": "Standup",
            **timed(series_start, 30),
            "recurrence": {
                "pattern": {"type": "daily", "interval": 1},
                "range": {
                    "type": "numbered",
                    "numberOfOccurrences": 3,
                    "startDate": series_start.date().isoformat(),
                },
            },
        },
    )
    synced(mslinked)
    busy = upstream_busy(sdr, mslinked.calendar_id, base - timedelta(hours=1), base + timedelta(days=9))
    standups = [iso(series_start + timedelta(days=n)) for n in range(3)]
    assert [b["start_time"] for b in busy] == [iso(tentative), iso(day), *standups]

    # One occurrence deleted in Outlook: it leaves the calendarView (removed), the others stay.
    occurrences = {
        json.loads(r.payload)["start"]["dateTime"][:16]: r.resource
        for r in IngestionRecord.objects.filter(connection_id=mslinked.pk, uid=master["id"])
    }
    second = series_start + timedelta(days=1)
    mslinked.fake.human_delete(OUTLOOK_CALENDAR, occurrences[second.strftime("%Y-%m-%dT%H:%M")])
    synced(mslinked)
    busy = upstream_busy(
        sdr, mslinked.calendar_id, series_start - timedelta(hours=1), base + timedelta(days=9)
    )
    assert [b["start_time"] for b in busy] == [standups[0], standups[2]]


def test_a_change_in_outlook_reaches_a_real_worker_through_a_notification(
    mslinked: MicrosoftLinked, sdr: Persona, celery_worker: Any
) -> None:
    synced(mslinked)
    assert connection_of(mslinked).push_id
    start = hour(40)
    mslinked.fake.human_put(OUTLOOK_CALENDAR, {"subject": "Lunch", **timed(start)})  # Graph notifies
    wait_until(
        lambda: upstream_busy(sdr, mslinked.calendar_id, start, start + timedelta(hours=1)), timeout=20
    )
    [delivery] = mslinked.fake.wait_for_deliveries(1, kind="notification")
    assert delivery.status == 202
    connection = connection_of(mslinked)
    assert connection.last_push_at is not None and connection.sync_lag_seconds is not None
    assert connection.sync_lag_seconds < 10


def test_forged_and_duplicated_notifications(mslinked: MicrosoftLinked, live_server: Any) -> None:
    synced(mslinked)
    connection = connection_of(mslinked)
    hook = f"{live_server.url}/hooks/microsoft"

    def notification(**fields: Any) -> dict[str, Any]:
        item = {"subscriptionId": connection.push_id, "changeType": "created", "clientState": "guess"}
        return {"value": [item | fields]}

    assert httpx.post(hook, json=notification()).status_code == 403
    assert httpx.post(hook, json=notification(subscriptionId="nope")).status_code == 404
    assert httpx.post(hook, content=b"not json").status_code == 400
    lifecycle = notification(lifecycleEvent="subscriptionRemoved")
    assert httpx.post(f"{hook}/lifecycle", json=lifecycle).status_code == 403
    rejected = audit_rows(event_type="sync.push.rejected")
    assert [row.http_status for row in rejected] == [403, 404, 400, 403]
    assert {row.details["provider"] for row in rejected} == {"microsoft"}
    connection = connection_of(mslinked)
    assert connection.last_push_at is None, "a forged notification triggers nothing"
    assert connection.push_id and connection.push_secret_hash, "nor removes the subscription"

    # The fake's own notification, delivered twice more: the syncs after the first find nothing new.
    mslinked.fake.human_put(OUTLOOK_CALENDAR, {"subject": "Call", **timed(hour(50))})
    [genuine] = mslinked.fake.wait_for_deliveries(1, kind="notification")
    assert genuine.status == 202 and genuine.payload is not None
    before = blocks_of(mslinked.pk)
    synced(mslinked)
    after_first = blocks_of(mslinked.pk)
    records = IngestionRecord.objects.count()
    for _ in range(2):
        assert httpx.post(hook, json=genuine.payload).status_code == 202
        synced(mslinked)
    assert blocks_of(mslinked.pk) == after_first != before
    assert IngestionRecord.objects.count() == records, "a repeated notification logs nothing new"
    assert len(audit_rows(event_type="sync.push.rejected")) == 4


def test_the_window_rolls_on_with_the_horizon(mslinked: MicrosoftLinked, sdr: Persona, settings: Any) -> None:
    synced(mslinked)
    # Beyond the first round's window: a delta link never reports it.
    late = hour(24 * (settings.SYNC_HORIZON_DAYS + 2))
    mslinked.fake.human_put(OUTLOOK_CALENDAR, {"subject": "Far off", **timed(late)})
    synced(mslinked)
    assert upstream_busy(sdr, mslinked.calendar_id, late, late + timedelta(hours=1)) == []

    # Three days on (the horizon's end with them): a new round over the moved window finds it.
    settings.SYNC_HORIZON_DAYS += 3
    synced(mslinked)
    busy = upstream_busy(sdr, mslinked.calendar_id, late, late + timedelta(hours=1))
    assert [b["start_time"] for b in busy] == [iso(late)]
    assert IngestionRecord.objects.filter(connection_id=mslinked.pk, kind=RecordKind.SNAPSHOT).count() == 2


def test_a_moved_copy_blocks_like_any_event(mslinked: MicrosoftLinked, sdr: Persona) -> None:
    at_ = hour(30)
    booking = sdr.client.post(
        f"/calendars/{mslinked.calendar_id}/commits", json={**span(at_), "title": "Demo"}
    )
    write_behind(mslinked.pk)
    [copy] = [e for e in mslinked.fake.events(OUTLOOK_CALENDAR) if e.get("subject") == "Demo"]
    moved = at_ + timedelta(hours=3)
    mslinked.fake.human_put(OUTLOOK_CALENDAR, {"id": copy["id"], **timed(moved, 30)})
    synced(mslinked)
    busy = upstream_busy(sdr, mslinked.calendar_id, at_, at_ + timedelta(hours=5))
    assert [b["start_time"] for b in busy] == [iso(moved)]
    assert UpstreamEvent.objects.get(resource=copy["id"]).booking_id == booking.json()["id"]


def test_a_subscription_is_renewed_before_it_expires_and_replaced_once_graph_lost_it(
    mslinked: MicrosoftLinked,
) -> None:
    synced(mslinked)
    first = connection_of(mslinked)
    # Less than a day left: the next sync renews it in place (PATCH), no new handshake.
    Connection.objects.filter(pk=mslinked.pk).update(push_expires_at=datetime.now(UTC) + timedelta(hours=2))
    renewals = mslinked.fake.count(f"/subscriptions/{first.push_id}")
    synced(mslinked)
    renewed = connection_of(mslinked)
    assert renewed.push_id == first.push_id and renewed.push_secret_hash == first.push_secret_hash
    assert mslinked.fake.count(f"/subscriptions/{first.push_id}") == renewals + 1
    assert renewed.push_expires_at is not None
    assert renewed.push_expires_at > datetime.now(UTC) + timedelta(days=2)

    # Gone at Graph (deleted, or expired while nobody renewed it): renewing finds 404; a new one opens.
    token = grant_from_secret(renewed.secret).access_token
    with GraphCalendarClient(token, api_url=mslinked.fake.api_url) as graph:
        graph.unsubscribe(first.push_id)
    Connection.objects.filter(pk=mslinked.pk).update(push_expires_at=datetime.now(UTC) + timedelta(hours=2))
    synced(mslinked)
    replaced = connection_of(mslinked)
    assert replaced.push_id != first.push_id and mslinked.fake.subscription(replaced.push_id) is not None
    assert len([d for d in mslinked.fake.deliveries if d.kind == "validation"]) == 4


def test_lifecycle_events_renew_replace_and_resync_on_a_real_worker(
    mslinked: MicrosoftLinked, celery_worker: Any
) -> None:
    synced(mslinked)
    first = connection_of(mslinked)
    fake = mslinked.fake

    # reauthorizationRequired: the same subscription, renewed.
    fake.lifecycle(first.push_id, "reauthorizationRequired")
    wait_until(lambda: not fake.subscription(first.push_id).reauthorization_required)  # type: ignore[union-attr]
    renewed = fake.subscription(first.push_id)
    assert renewed is not None and first.push_expires_at is not None
    assert renewed.expiration >= first.push_expires_at
    wait_until(lambda: connection_of(mslinked).push_expires_at == renewed.expiration)
    assert connection_of(mslinked).push_id == first.push_id

    # missed: a sync reads whatever the lost notifications were about.
    synced_at = connection_of(mslinked).last_synced_at
    assert synced_at is not None
    fake.lifecycle(first.push_id, "missed")
    wait_until(lambda: (connection_of(mslinked).last_synced_at or synced_at) > synced_at)

    # subscriptionRemoved: Graph dropped it; a new one is opened (through the handshake again).
    fake.lifecycle(first.push_id, "subscriptionRemoved")
    wait_until(lambda: connection_of(mslinked).push_id not in ("", first.push_id))
    replacement = connection_of(mslinked)
    assert fake.subscription(replacement.push_id) is not None
    assert replacement.push_secret_hash != first.push_secret_hash
    lifecycle = [d.status for d in fake.wait_for_deliveries(3, kind="lifecycle")]
    assert lifecycle == [202, 202, 202]
