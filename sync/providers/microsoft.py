"""Microsoft 365 (Graph) as an upstream provider: calendarView delta over a bounded window
(learn.microsoft.com/graph/delta-query-events, /graph/api/event-delta), and our bookings written with a
transactionId. The delta lists instances (single events, occurrences and exceptions; never series
masters), each its own resource keyed by its id, removals as `@removed`. Our copies carry a line naming
the booking (sync.formats.MICROSOFT_BOOKING_LINE): that is how their echo is recognised, as the delta
cannot $expand extended properties. Graph assigns event ids, so a copy the person deleted in Outlook is
not brought back by a later rewrite. Subscriptions are sync.push.channels'.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from agentcal.clock import server_now
from bookings.spans import Span
from sync.formats import MICROSOFT_BOOKING_LINE
from sync.ingest import horizon
from sync.models import Connection, IngestionRecord, RecordKind
from sync.providers.base import BookingCopy
from sync.providers.errors import NotFound
from sync.providers.microsoft_client import GraphCalendarClient, transaction_id_for
from sync.providers.oauth import OAuthProvider, Page

# A new full round (a fresh window) once the window's end is this far behind the horizon's: the same
# daily step at which sync.services re-expands recurring events.
WINDOW_ROLL = timedelta(days=1)


class MicrosoftProvider(OAuthProvider[GraphCalendarClient, Span]):
    def open_client(self, access_token: str) -> AbstractContextManager[GraphCalendarClient]:
        return GraphCalendarClient(access_token, api_url=settings.SYNC_MICROSOFT_API_URL)

    def begin(self, connection: Connection) -> tuple[Span, str | None]:
        """The window is fixed when a round starts (the links encode it): from a day back to the end of
        the sync horizon. Its end is kept in the connection's `ctag` (no OAuth provider uses it
        otherwise); once it has fallen a day behind the horizon's, a new full round starts, so events
        entering the horizon are seen."""
        window = horizon(server_now())
        link = connection.sync_token or None
        if link is not None and _window_end(connection) < window.end - WINDOW_ROLL:
            link = None  # the horizon moved on: a new round over today's window
        return window, link

    def page(
        self,
        client: GraphCalendarClient,
        connection: Connection,
        fixed: Span,
        marker: str | None,
        cursor: str | None,
    ) -> Page:
        page = client.delta_page(
            connection.remote_calendar_id, start=fixed.start, end=fixed.end, link=cursor or marker
        )
        return Page(page.items, page.next_link, page.delta_link)

    def marker_fields(self, fixed: Span, marker: str, *, full: bool) -> dict[str, str]:
        fields = {"sync_token": marker}
        if full:
            fields["ctag"] = fixed.end.astimezone(UTC).isoformat()
        return fields

    def record(self, item: dict[str, Any]) -> IngestionRecord:
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

    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        event = {**_event(copy), "transactionId": transaction_id_for(copy.booking_id)}
        # A create sent again with the same transactionId (a retry, a concurrent run) returns the event
        # the first one made: one copy per booking.
        created = self.with_client(
            connection, lambda client: client.create(connection.remote_calendar_id, event)
        )
        return str(created["id"]), str(created.get("changeKey") or "")

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None:
        """PATCH only the fields we own: what the person added (categories, notes) stays."""
        try:
            updated = self.with_client(connection, lambda client: client.update(name, _event(copy)))
        except NotFound:
            return None  # the person deleted our copy; Graph cannot re-create it under that id
        return str(updated.get("changeKey") or "")

    def remove_copy(self, connection: Connection, name: str) -> None:
        self.with_client(connection, lambda client: client.delete(name))  # already gone is fine


def _window_end(connection: Connection) -> datetime:
    try:
        return datetime.fromisoformat(connection.ctag)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)  # unknown: start a new round


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
