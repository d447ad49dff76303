"""Microsoft 365 (Graph) as an upstream provider: calendarView delta over a bounded window, our bookings
written with a transactionId, and change-notification subscriptions.

Sync (learn.microsoft.com/graph/delta-query-events, /graph/api/event-delta): calendarView delta lists the
instances between a start and an end (single events, occurrences and exceptions of series; never series
masters), each its own resource keyed by its id. The first round lists them all (a snapshot); the
deltaLink of its last page, stored as the connection's sync token, then answers what changed since,
removals as `@removed`. The window is fixed when a round starts (the links encode it): it runs from a
day back to the end of the sync horizon (sync.ingest.horizon), and a new full round starts once that
end has fallen a day behind the horizon's, so events entering the horizon are seen. The window's end
is kept in the connection's `ctag`, which no OAuth provider uses otherwise. A refused link (expired,
evicted: DeltaTokenInvalid) means a full round as well, logged as a snapshot.

Our bookings: created with a `transactionId` derived from the booking id, so a retried or concurrent
create returns the event the first one made; the body carries a line naming the booking
(sync.formats.MICROSOFT_BOOKING_LINE), which is how the copy's echo in the delta is recognised (the
delta cannot $expand extended properties). Graph assigns event ids, so a copy the person deleted in
Outlook is not brought back by a later rewrite.

Push (learn.microsoft.com/graph/change-notifications-delivery-webhooks, -lifecycle-events): a
subscription on the calendar's events; notifications carry no event data and only ask for a sync
(sync.push). Subscriptions are renewed in place (PATCH) a day before they expire.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction

from agentcal.clock import server_now
from bookings.spans import Span
from sync import microsoft
from sync.formats import MICROSOFT_BOOKING_LINE
from sync.google_provider import push_secret_hash
from sync.ingest import horizon, log_records
from sync.models import Connection, IngestionRecord, RecordKind
from sync.oauth import fresh_access_token
from sync.providers import BookingCopy, Fetched, store_marker

# Pages of one round; more means a calendar changing faster than we can read it.
MAX_PAGES = 400
# A new full round (a fresh window) once the window's end is this far behind the horizon's: the same
# daily step at which sync.services re-expands recurring events.
WINDOW_ROLL = timedelta(days=1)
# The lifetime asked for a subscription: three days at most (the brief renewal margin is one day, so
# two days of missed renewals still leave it open), and within both the documented maximum and the
# 4,230 minutes older versions of that page gave, in case a tenant still enforces those.
SUBSCRIPTION_TTL = min(
    timedelta(minutes=microsoft.MAX_SUBSCRIPTION_MINUTES), timedelta(days=3), timedelta(minutes=4230)
)


T = TypeVar("T")


def with_client(connection: Connection, work: Callable[[microsoft.GraphCalendarClient], T]) -> T:
    """Run `work` with a client holding a fresh access token; if Graph refuses the token before its
    time (401), refresh it once and run `work` again (every `work` here is safe to repeat)."""
    for attempt in range(2):
        token = fresh_access_token(connection, force=attempt > 0)
        with microsoft.GraphCalendarClient(token, api_url=settings.SYNC_MICROSOFT_API_URL) as client:
            try:
                return work(client)
            except microsoft.Unauthorized:
                if attempt:
                    raise
    raise AssertionError("unreachable")


class MicrosoftProvider:
    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched:
        window = horizon(server_now())
        link = connection.sync_token or None
        if link is not None and _window_end(connection) < window.end - WINDOW_ROLL:
            link = None  # the horizon moved on: a new round over today's window

        def listing(client: microsoft.GraphCalendarClient) -> tuple[list[dict[str, Any]], str, bool]:
            try:
                return (*_all_pages(client, connection, window, link), link is None)
            except microsoft.DeltaTokenInvalid:
                return (*_all_pages(client, connection, window, None), True)

        items, delta_link, full = with_client(connection, listing)
        records = [_record(item) for item in items]
        if full:
            present = sorted(r.resource for r in records if r.kind == RecordKind.RESOURCE)
            records.append(IngestionRecord(kind=RecordKind.SNAPSHOT, payload=json.dumps(present)))
        marker = {"sync_token": delta_link}
        if full:
            marker["ctag"] = window.end.astimezone(UTC).isoformat()
        with transaction.atomic():
            log_records(connection, records)
            store_marker(connection, lease_token, **marker)
        return Fetched(records=len(records), full=full)

    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        event = {**_event(copy), "transactionId": microsoft.transaction_id_for(copy.booking_id)}
        # A create sent again with the same transactionId (a retry, a concurrent run) returns the event
        # the first one made: one copy per booking.
        created = with_client(connection, lambda client: client.create(connection.remote_calendar_id, event))
        return str(created["id"]), str(created.get("changeKey") or "")

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None:
        """PATCH only the fields we own: what the person added (categories, notes) stays."""
        try:
            updated = with_client(connection, lambda client: client.update(name, _event(copy)))
        except microsoft.NotFound:
            return None  # the person deleted our copy; Graph cannot re-create it under that id
        return str(updated.get("changeKey") or "")

    def close_push(self, connection: Connection) -> None:
        close_subscription(connection)

    def remove_copy(self, connection: Connection, name: str) -> None:
        with_client(connection, lambda client: client.delete(name))  # already gone is fine


def _window_end(connection: Connection) -> datetime:
    try:
        return datetime.fromisoformat(connection.ctag)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)  # unknown: start a new round


def _all_pages(
    client: microsoft.GraphCalendarClient, connection: Connection, window: Span, link: str | None
) -> tuple[list[dict[str, Any]], str]:
    """Every page of one round (from `link`, or a full listing of the window), and its deltaLink."""
    items: list[dict[str, Any]] = []
    for _ in range(MAX_PAGES):
        page = client.delta_page(connection.remote_calendar_id, start=window.start, end=window.end, link=link)
        items += page.items
        if page.delta_link is not None:
            return items, page.delta_link
        link = page.next_link
    raise microsoft.GraphError(f"more than {MAX_PAGES} pages in one sync")


def _record(item: dict[str, Any]) -> IngestionRecord:
    event_id = str(item.get("id") or "")
    if "@removed" in item:
        # Deleted, or moved out of the window (Graph does not say which): either way it no longer
        # blocks anything we look at.
        return IngestionRecord(kind=RecordKind.DELETED, resource=event_id)
    return IngestionRecord(
        kind=RecordKind.RESOURCE,
        resource=event_id,
        etag=str(item.get("changeKey") or item.get("@odata.etag") or ""),
        payload=json.dumps(item),
    )


def _event(copy: BookingCopy) -> dict[str, Any]:
    line = MICROSOFT_BOOKING_LINE.format(booking_id=copy.booking_id)
    return {
        "subject": copy.summary,
        "body": {"contentType": "text", "content": f"{copy.description}\n\n{line}"},
        "start": {"dateTime": _wall_utc(copy.start), "timeZone": "UTC"},
        "end": {"dateTime": _wall_utc(copy.end), "timeZone": "UTC"},
        "isAllDay": False,
        "showAs": "busy",
    }


def _wall_utc(moment: datetime) -> str:
    """Graph's dateTime: a wall-clock time without offset (its zone is `timeZone`), to the microsecond
    (Graph keeps 100 ns ticks), so the echo's span equals the booking's exactly."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat()


# --- Subscriptions -----------------------------------------------------------------------------------


def open_subscription(connection: Connection) -> None:
    """Subscribe to changes of the calendar's events: notifications to SYNC_PUSH_BASE_URL/hooks/microsoft,
    lifecycle events to …/lifecycle, each carrying a secret (clientState) only we and Graph know. The
    one it replaces, if any, is deleted.

    Graph assigns the subscription's id, and before answering it checks both URLs with a validation
    request that carries neither id nor clientState: the endpoints echo it without looking anything up
    (sync.push), so nothing needs saving beforehand."""
    client_state = secrets.token_urlsafe(32)
    old = connection.push_id
    base = settings.SYNC_PUSH_BASE_URL
    expiration = server_now() + SUBSCRIPTION_TTL
    subscription = with_client(
        connection,
        lambda client: client.subscribe(
            resource=f"me/calendars/{connection.remote_calendar_id}/events",
            notification_url=f"{base}/hooks/microsoft",
            lifecycle_url=f"{base}/hooks/microsoft/lifecycle",
            client_state=client_state,
            expiration=expiration,
        ),
    )
    Connection.objects.filter(pk=connection.pk).update(
        push_id=subscription.id,
        push_resource_id="",
        push_secret_hash=push_secret_hash(client_state),
        push_expires_at=subscription.expiration,
    )
    if old and old != subscription.id:
        with suppress(microsoft.GraphError):  # expired or removed already: nothing to delete
            with_client(connection, lambda client: client.unsubscribe(old))


def renew_subscription(connection: Connection) -> None:
    """Move the subscription's expiry on (this also answers a reauthorizationRequired); one Graph no
    longer knows is replaced by a new one."""
    if not connection.push_id:
        open_subscription(connection)
        return
    subscription_id, expiration = connection.push_id, server_now() + SUBSCRIPTION_TTL
    try:
        subscription = with_client(connection, lambda client: client.renew(subscription_id, expiration))
    except microsoft.NotFound:
        Connection.objects.filter(pk=connection.pk, push_id=subscription_id).update(push_id="")
        connection.push_id = ""
        open_subscription(connection)
        return
    Connection.objects.filter(pk=connection.pk, push_id=connection.push_id).update(
        push_expires_at=subscription.expiration
    )


def close_subscription(connection: Connection) -> None:
    if connection.push_id:
        with suppress(microsoft.NotFound):  # it had expired already
            with_client(connection, lambda client: client.unsubscribe(connection.push_id))
