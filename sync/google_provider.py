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
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import Any

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


@contextmanager
def google_client(connection: Connection) -> Iterator[google.GoogleCalendarClient]:
    token = fresh_access_token(connection)
    with google.GoogleCalendarClient(token, api_url=settings.SYNC_GOOGLE_API_URL) as client:
        yield client


class GoogleProvider:
    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched:
        with google_client(connection) as client:
            full = not connection.sync_token
            try:
                items, sync_token = _all_pages(client, connection, connection.sync_token or None)
            except google.SyncTokenGone:
                items, sync_token = _all_pages(client, connection, None)
                full = True
        records = [_record(item) for item in items]
        if full:
            present = sorted(r.resource for r in records if r.kind == RecordKind.RESOURCE)
            records.append(IngestionRecord(kind=RecordKind.SNAPSHOT, payload=json.dumps(present)))
        with transaction.atomic():
            log_records(connection, records)
            store_marker(connection, lease_token, sync_token=sync_token)
        return Fetched(records=len(records), full=full)

    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        event_id = google.event_id_for(copy.booking_id)
        with google_client(connection) as client:
            try:
                created = client.insert(connection.remote_calendar_id, {"id": event_id, **_event(copy)})
            except google.Conflict:
                # The id is taken: an earlier or concurrent run wrote it, or it was written and then
                # deleted upstream (Google never frees an id). A deleted copy is brought back.
                existing = client.get(connection.remote_calendar_id, event_id)
                if existing is None or existing.get("status") != "cancelled":
                    return event_id, None
                restored = client.update(
                    connection.remote_calendar_id, event_id, {**existing, **_event(copy)}, etag=None
                )
                return event_id, str(restored.get("etag") or "")
        return event_id, str(created.get("etag") or "")

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None:
        """Rewrite with If-Match on the version read just before; if the person changed it in between
        (412), read again and apply once more."""
        with google_client(connection) as client:
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

    def remove_copy(self, connection: Connection, name: str) -> None:
        with google_client(connection) as client:
            client.delete(connection.remote_calendar_id, name)


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
    with google_client(connection) as client:
        channel = client.watch(
            connection.remote_calendar_id,
            channel_id=channel_id,
            address=f"{settings.SYNC_PUSH_BASE_URL}/hooks/google",
            token=token,
            ttl_seconds=int(CHANNEL_TTL.total_seconds()),
        )
        Connection.objects.filter(pk=connection.pk, push_id=channel_id).update(
            push_resource_id=channel.resource_id, push_expires_at=channel.expiration
        )
        if old[0]:
            with suppress(google.NotFound):  # it had expired already
                client.stop(channel_id=old[0], resource_id=old[1])


def close_channel(connection: Connection) -> None:
    if not connection.push_id:
        return
    with google_client(connection) as client, suppress(google.NotFound):
        client.stop(channel_id=connection.push_id, resource_id=connection.push_resource_id)
