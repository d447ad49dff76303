"""Google Calendar as an upstream provider: incremental sync with sync tokens, and our bookings written
with client-supplied event ids (developers.google.com/calendar/api/guides/sync). A `410 Gone` token
means a full sync that replaces the connection's blocks; a cancelled event is a deletion, except for an
exception of a series, where it cancels that one instance. Push channels are sync.push.channels'.

Design: docs/architecture.md, "Upstream sync" (what each provider's payload holds).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from datetime import datetime
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
        # upstream (Google never frees an id). A deleted copy is brought back, under that same id.
        return event_id, _rewrite(client, connection, event_id, copy, only_if_deleted=True)
    return event_id, str(created.get("etag") or "")


def _update(client: GoogleCalendarClient, connection: Connection, name: str, copy: BookingCopy) -> str:
    return _rewrite(client, connection, name, copy, only_if_deleted=False) or ""


def _rewrite(
    client: GoogleCalendarClient,
    connection: Connection,
    name: str,
    copy: BookingCopy,
    *,
    only_if_deleted: bool,
) -> str | None:
    """Rewrite with If-Match on the version read just before. A 412 means a write in between — the
    person's, or a concurrent run's of the same change: read again, and stop once the event already says
    what we would write (a blind second write would carry a stale `sequence`, which Google refuses)."""
    wanted = _event(copy)
    for _ in range(5):
        current = client.get(connection.remote_calendar_id, name)
        if current is None:
            if only_if_deleted:
                return None
            created = client.insert(connection.remote_calendar_id, {"id": name, **wanted})
            return str(created.get("etag") or "")
        if only_if_deleted and current.get("status") != "cancelled":
            return None  # there and live: written by an earlier or concurrent run
        if _says(current, wanted):
            return str(current.get("etag") or "")
        try:
            updated = client.update(
                connection.remote_calendar_id,
                name,
                {**current, **wanted},
                etag=str(current.get("etag") or "") or None,
            )
        except PreconditionFailed:
            continue
        return str(updated.get("etag") or "")
    raise PreconditionFailed("the event kept changing while we rewrote it", status=412)


def _says(event: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether Google's event already holds what we would write (times compared as instants: Google may
    answer them in another offset)."""

    def instant(side: dict[str, Any] | None) -> datetime | None:
        moment = (side or {}).get("dateTime")
        return datetime.fromisoformat(moment) if moment else None

    def ours(properties: dict[str, Any] | None) -> object:
        return (properties or {}).get("private", {}).get("agentcalBooking")

    return (
        all(event.get(key) == wanted[key] for key in ("summary", "description", "transparency", "status"))
        and all(instant(event.get(key)) == instant(wanted[key]) for key in ("start", "end"))
        and ours(event.get("extendedProperties")) == ours(wanted["extendedProperties"])
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
