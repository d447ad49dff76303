"""Google Calendar as an upstream provider: incremental sync with sync tokens, our bookings written with
client-supplied event ids, and push channels.

Sync (developers.google.com/calendar/api/guides/sync): events.list with `showDeleted` and no
`singleEvents` (series come as a master and its exceptions; sync.formats turns them into one
iCalendar series, expanded like CalDAV's), following `pageToken`s; the `nextSyncToken` of the last
page is stored with the records. `410 Gone` means the token is no longer valid: a full sync, logged as
a snapshot, replaces the connection's blocks. A deleted event comes back `status: cancelled`: a
deletion, except for an exception of a series, where it cancels that one instance.

Push (developers.google.com/calendar/api/guides/push): a notification carries no event data; it only
asks for a sync (sync.push). Channels cannot be renewed: a new one is opened before the old expires,
and the old is stopped.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from contextlib import suppress
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction

from agentcal.clock import isoformat_z
from sync import google
from sync.ingest import log_records
from sync.models import Connection, IngestionRecord, RecordKind
from sync.oauth import fresh_access_token
from sync.providers import BookingCopy, Fetched, store_marker

# The longest channel Google grants for events (it may grant less; the answer's expiration counts).
CHANNEL_TTL = timedelta(days=7)
# Pages of one sync; more means a calendar changing faster than we can read it.
MAX_PAGES = 400


T = TypeVar("T")


def with_client(connection: Connection, work: Callable[[google.GoogleCalendarClient], T]) -> T:
    """Run `work` with a client holding a fresh access token; if Google refuses the token before its
    time (401), refresh it once and run `work` again."""
    for attempt in range(2):
        token = fresh_access_token(connection, force=attempt > 0)
        with google.GoogleCalendarClient(token, api_url=settings.SYNC_GOOGLE_API_URL) as client:
            try:
                return work(client)
            except google.Unauthorized:
                if attempt:
                    raise
    raise AssertionError("unreachable")


class GoogleProvider:
    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched:
        def listing(client: google.GoogleCalendarClient) -> tuple[list[dict[str, Any]], str, bool]:
            try:
                return (
                    *_all_pages(client, connection, connection.sync_token or None),
                    not connection.sync_token,
                )
            except google.SyncTokenGone:
                return (*_all_pages(client, connection, None), True)

        items, sync_token, full = with_client(connection, listing)
        records = [_record(item) for item in items]
        if full:
            present = sorted(r.resource for r in records if r.kind == RecordKind.RESOURCE)
            records.append(IngestionRecord(kind=RecordKind.SNAPSHOT, payload=json.dumps(present)))
        with transaction.atomic():
            log_records(connection, records)
            store_marker(connection, lease_token, sync_token=sync_token)
        return Fetched(records=len(records), full=full)

    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        return with_client(connection, lambda client: _create(client, connection, copy))

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None:
        return with_client(connection, lambda client: _update(client, connection, name, copy))

    def close_push(self, connection: Connection) -> None:
        close_channel(connection)

    def remove_copy(self, connection: Connection, name: str) -> None:
        with_client(connection, lambda client: client.delete(connection.remote_calendar_id, name))


def _create(
    client: google.GoogleCalendarClient, connection: Connection, copy: BookingCopy
) -> tuple[str, str | None]:
    event_id = google.event_id_for(copy.booking_id)
    try:
        created = client.insert(connection.remote_calendar_id, {"id": event_id, **_event(copy)})
    except google.Conflict:
        # The id is taken: an earlier or concurrent run wrote it, or it was written and then deleted
        # upstream (Google never frees an id). A deleted copy is brought back.
        existing = client.get(connection.remote_calendar_id, event_id)
        if existing is None or existing.get("status") != "cancelled":
            return event_id, None
        restored = client.update(
            connection.remote_calendar_id, event_id, {**existing, **_event(copy)}, etag=None
        )
        return event_id, str(restored.get("etag") or "")
    return event_id, str(created.get("etag") or "")


def _update(client: google.GoogleCalendarClient, connection: Connection, name: str, copy: BookingCopy) -> str:
    """Rewrite with If-Match on the version read just before; if the person changed it in between
    (412), read again and apply once more."""
    for _ in range(3):
        current = client.get(connection.remote_calendar_id, name)
        if current is None:
            created = client.insert(connection.remote_calendar_id, {"id": name, **_event(copy)})
            return str(created.get("etag") or "")
        try:
            updated = client.update(
                connection.remote_calendar_id,
                name,
                {**current, **_event(copy)},
                etag=str(current.get("etag") or "") or None,
            )
        except google.PreconditionFailed:
            continue
        return str(updated.get("etag") or "")
    raise google.PreconditionFailed("the event kept changing while we rewrote it", status=412)


def _all_pages(
    client: google.GoogleCalendarClient, connection: Connection, sync_token: str | None
) -> tuple[list[dict[str, Any]], str]:
    """Every page of one listing, and the nextSyncToken that only the last page carries."""
    items: list[dict[str, Any]] = []
    page_token: str | None = None
    for _ in range(MAX_PAGES):
        page = client.events_page(connection.remote_calendar_id, sync_token=sync_token, page_token=page_token)
        items += page.items
        if page.next_page_token is None:
            if page.next_sync_token is None:
                raise google.GoogleError("the last page carried no nextSyncToken", status=None)
            return items, page.next_sync_token
        page_token = page.next_page_token
    raise google.GoogleError(f"more than {MAX_PAGES} pages in one sync", status=None)


def _record(item: dict[str, Any]) -> IngestionRecord:
    event_id = str(item.get("id") or "")
    if item.get("status") == "cancelled" and not item.get("recurringEventId"):
        return IngestionRecord(kind=RecordKind.DELETED, resource=event_id)
    return IngestionRecord(
        kind=RecordKind.RESOURCE,
        resource=event_id,
        etag=str(item.get("etag") or ""),
        payload=json.dumps(item),
    )


def _event(copy: BookingCopy) -> dict[str, Any]:
    return {
        "summary": copy.summary,
        "description": copy.description,
        "start": {"dateTime": isoformat_z(copy.start), "timeZone": "UTC"},
        "end": {"dateTime": isoformat_z(copy.end), "timeZone": "UTC"},
        "transparency": "opaque",
        "status": "confirmed",
        "extendedProperties": {"private": {"agentcalBooking": copy.booking_id}},
    }


# --- Push channels -----------------------------------------------------------------------------------


def push_secret_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def open_channel(connection: Connection) -> None:
    """Open a new push channel for the calendar (stopping the one it replaces): notifications to
    SYNC_PUSH_BASE_URL/hooks/google, each carrying a secret only we and Google know."""
    token = secrets.token_urlsafe(32)
    channel_id = f"agentcal-{secrets.token_hex(12)}"
    old = (connection.push_id, connection.push_resource_id)
    # Saved before asking: Google's `sync` handshake may arrive before watch() has answered.
    Connection.objects.filter(pk=connection.pk).update(
        push_id=channel_id, push_resource_id="", push_secret_hash=push_secret_hash(token)
    )
    channel = with_client(
        connection,
        lambda client: client.watch(
            connection.remote_calendar_id,
            channel_id=channel_id,
            address=f"{settings.SYNC_PUSH_BASE_URL}/hooks/google",
            token=token,
            ttl_seconds=int(CHANNEL_TTL.total_seconds()),
        ),
    )
    Connection.objects.filter(pk=connection.pk, push_id=channel_id).update(
        push_resource_id=channel.resource_id, push_expires_at=channel.expiration
    )
    if old[0]:
        _stop(connection, *old)


def close_channel(connection: Connection) -> None:
    if connection.push_id:
        _stop(connection, connection.push_id, connection.push_resource_id)


def _stop(connection: Connection, channel_id: str, resource_id: str) -> None:
    def stop(client: google.GoogleCalendarClient) -> None:
        with suppress(google.NotFound):  # it had expired already
            client.stop(channel_id=channel_id, resource_id=resource_id)

    with_client(connection, stop)
