"""What every upstream provider shares: its interface, the copy of a booking it writes, and the tail of
every fetch (the records and the provider's new change marker committed together).

A provider never touches blocks: `fetch` appends raw payloads to the log, and sync.ingest turns the log
into blocks. Write-behind (sync.writeback) creates, updates and removes copies of our bookings through
`*_copy`; a create never overwrites, so a second create of one booking finds the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.db import transaction

from sync.ingest import log_records
from sync.models import Connection, IngestionRecord, RecordKind


@dataclass(frozen=True)
class Fetched:
    records: int
    full: bool


@dataclass(frozen=True)
class BookingCopy:
    """One of our bookings as written upstream. Its name there derives from `booking_id`."""

    booking_id: str
    start: datetime
    end: datetime
    summary: str
    description: str
    sequence: int
    stamp: datetime


class LeaseLost(Exception):
    """The sync run's lease lapsed and another run took the connection: this run's fetch is dropped
    (its records and token are not committed), so two runs' logs never interleave."""


class UpstreamProvider(Protocol):
    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched: ...
    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        """Write a new copy; returns its name upstream and its version (None if already there)."""
        ...

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None: ...
    def remove_copy(self, connection: Connection, name: str) -> None: ...


def store_marker(connection: Connection, lease_token: str | None, **marker: str) -> None:
    """Save the provider's new change marker with the records, if this run still holds the lease."""
    updated = Connection.objects.filter(pk=connection.pk)
    if lease_token is not None:
        updated = updated.filter(lease_token=lease_token)
    if not updated.update(**marker):
        raise LeaseLost(connection.public_id)


def record_fetch(
    connection: Connection,
    records: list[IngestionRecord],
    *,
    lease_token: str | None,
    snapshot: Iterable[str] | None,
    **marker: str,
) -> Fetched:
    """Log the fetched records and store the new change marker in one transaction. `snapshot`: every
    resource present upstream, when the fetch listed them all; logged last, so the events missing from
    it are tombstoned."""
    if snapshot is not None:
        records = [*records, IngestionRecord(kind=RecordKind.SNAPSHOT, payload=json.dumps(sorted(snapshot)))]
    with transaction.atomic():
        log_records(connection, records)
        store_marker(connection, lease_token, **marker)
    return Fetched(records=len(records), full=snapshot is not None)
