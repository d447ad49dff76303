"""Google Calendar as an upstream provider: incremental sync with sync tokens, and our bookings written
with client-supplied event ids (developers.google.com/calendar/api/guides/sync). A `410 Gone` token
means a full sync that replaces the connection's blocks; a cancelled event is a deletion, except for an
exception of a series, where it cancels that one instance. Push channels are sync.push.channels'.

Design: docs/architecture.md, "Upstream sync" (what each provider's payload holds).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any

from django.conf import settings

from agentcal.clock import isoformat_z
from sync.models import Connection, IngestionRecord, RecordKind
from sync.providers.base import BookingCopy
from sync.providers.errors import Conflict, PreconditionFailed
from sync.providers.google_client import GoogleCalendarClient, event_id_for
from sync.providers.oauth import OAuthProvider, Page


class GoogleProvider(OAuthProvider[GoogleCalendarClient, None]):
    def open_client(self, access_token: str) -> AbstractContextManager[GoogleCalendarClient]:
        return GoogleCalendarClient(access_token, api_url=settings.SYNC_GOOGLE_API_URL)

    def begin(self, connection: Connection) -> tuple[None, str | None]:
        return None, connection.sync_token or None

    def page(
        self,
        client: GoogleCalendarClient,
        connection: Connection,
        fixed: None,
        marker: str | None,
        cursor: str | None,
    ) -> Page:
        page = client.events_page(connection.remote_calendar_id, sync_token=marker, page_token=cursor)
        return Page(page.items, page.next_page_token, page.next_sync_token)

    def record(self, item: dict[str, Any]) -> IngestionRecord:
        event_id = str(item.get("id") or "")
        if item.get("status") == "cancelled" and not item.get("recurringEventId"):
            return IngestionRecord(kind=RecordKind.DELETED, resource=event_id)
        return IngestionRecord(
            kind=RecordKind.RESOURCE,
            resource=event_id,
            etag=str(item.get("etag") or ""),
            payload=json.dumps(item),
        )

    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        return self.with_client(connection, lambda client: _create(client, connection, copy))

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None:
        return self.with_client(connection, lambda client: _update(client, connection, name, copy))

    def remove_copy(self, connection: Connection, name: str) -> None:
        self.with_client(connection, lambda client: client.delete(connection.remote_calendar_id, name))


def _create(
    client: GoogleCalendarClient, connection: Connection, copy: BookingCopy
) -> tuple[str, str | None]:
    event_id = event_id_for(copy.booking_id)
    try:
        created = client.insert(connection.remote_calendar_id, {"id": event_id, **_event(copy)})
    except Conflict:
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


def _update(client: GoogleCalendarClient, connection: Connection, name: str, copy: BookingCopy) -> str:
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
        except PreconditionFailed:
            continue
        return str(updated.get("etag") or "")
    raise PreconditionFailed("the event kept changing while we rewrote it", status=412)


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
