"""The base of the OAuth providers (Google Calendar, Microsoft 365): a client holding a fresh access
token (refreshed once more when the provider refuses it before its time), a listing followed page by
page to the change marker its last page carries, a refused marker answered with a full listing, and the
fetch's tail. Each provider says how to open its client, read one page and turn an item into a record.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sync.models import Connection, IngestionRecord, RecordKind
from sync.oauth import fresh_access_token
from sync.providers.base import BookingCopy, Fetched, record_fetch
from sync.providers.errors import SyncTokenRefused, Unauthorized, UpstreamError

ClientT = TypeVar("ClientT")
RoundT = TypeVar("RoundT")
T = TypeVar("T")

# Pages of one listing; more means a calendar changing faster than we can read it.
MAX_PAGES = 400


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None  # the next page of this listing; None on its last
    marker: str | None  # the change marker for next time, carried by the last page only


class OAuthProvider(ABC, Generic[ClientT, RoundT]):
    """`RoundT` is what one listing is fixed to when it starts, passed as `fixed` (Graph's window; nothing
    for Google)."""

    @abstractmethod
    def open_client(self, access_token: str) -> AbstractContextManager[ClientT]: ...

    @abstractmethod
    def begin(self, connection: Connection) -> tuple[RoundT, str | None]:
        """What this listing is fixed to, and the stored marker to start from (None: a full listing)."""

    @abstractmethod
    def page(
        self, client: ClientT, connection: Connection, fixed: RoundT, marker: str | None, cursor: str | None
    ) -> Page:
        """One page: the first of a listing from `marker` (a full one when None), or the one `cursor`
        names."""

    @abstractmethod
    def record(self, item: dict[str, Any]) -> IngestionRecord: ...

    def marker_fields(self, fixed: RoundT, marker: str, *, full: bool) -> dict[str, str]:
        """The connection's fields that store the new marker."""
        return {"sync_token": marker}

    @abstractmethod
    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]: ...
    @abstractmethod
    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None: ...
    @abstractmethod
    def remove_copy(self, connection: Connection, name: str) -> None: ...

    def with_client(self, connection: Connection, work: Callable[[ClientT], T]) -> T:
        """Run `work` with a client holding a fresh access token; if the provider refuses the token before
        its time (401), refresh it once and run `work` again (every `work` here is safe to repeat)."""
        for attempt in range(2):
            token = fresh_access_token(connection, force=attempt > 0)
            with self.open_client(token) as client:
                try:
                    return work(client)
                except Unauthorized:
                    if attempt:
                        raise
        raise AssertionError("unreachable")

    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched:
        fixed, marker = self.begin(connection)

        def listing(client: ClientT) -> tuple[list[dict[str, Any]], str, bool]:
            try:
                return (*self._all_pages(client, connection, fixed, marker), marker is None)
            except SyncTokenRefused:
                return (*self._all_pages(client, connection, fixed, None), True)

        items, new_marker, full = self.with_client(connection, listing)
        records = [self.record(item) for item in items]
        snapshot = [r.resource for r in records if r.kind == RecordKind.RESOURCE] if full else None
        return record_fetch(
            connection,
            records,
            lease_token=lease_token,
            snapshot=snapshot,
            **self.marker_fields(fixed, new_marker, full=full),
        )

    def _all_pages(
        self, client: ClientT, connection: Connection, fixed: RoundT, marker: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        """Every page of one listing, and the marker that only its last page carries."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = self.page(client, connection, fixed, marker, cursor)
            items += page.items
            if page.next_cursor is None:
                if page.marker is None:
                    raise UpstreamError("the last page carried no change marker")
                return items, page.marker
            cursor = page.next_cursor
        raise UpstreamError(f"more than {MAX_PAGES} pages in one sync")
