"""Providers: how each kind of upstream calendar is read into the ingestion log and written to.

A provider never touches blocks: `fetch` appends raw payloads to the log (with the provider's new
change marker, in one transaction), and sync.ingest turns the log into blocks. Write-behind calls
`put`/`remove` with our bookings' iCalendar data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.db import transaction

from agentcal.errors import UnsafeUpstreamUrl, UnsafeWebhookUrl, UpstreamUnreachable
from sync import caldav
from sync.credentials import unseal
from sync.ingest import log_records
from sync.models import Connection, IngestionRecord, Provider, RecordKind, UpstreamEvent
from webhooks.url_guard import validate_webhook_url


@dataclass(frozen=True)
class Fetched:
    records: int
    full: bool


class UpstreamProvider(Protocol):
    def fetch(self, connection: Connection) -> Fetched: ...
    def put(
        self, connection: Connection, name: str, ics: str, *, create: bool, etag: str | None
    ) -> str | None: ...
    def remove(self, connection: Connection, name: str) -> None: ...


def check_target(url: str) -> None:
    """The upstream URL must be http(s) and, unless settings allow it, reach no private address: the
    person connecting chooses it, like a webhook URL (the same rules: webhooks/url_guard.py)."""
    try:
        validate_webhook_url(url, allow_private=settings.SYNC_ALLOW_PRIVATE_TARGETS)
    except UnsafeWebhookUrl as exc:
        raise UnsafeUpstreamUrl(f"The calendar URL cannot be used: {exc.detail}") from None


@contextmanager
def caldav_client(connection: Connection) -> Iterator[caldav.CalDAVClient]:
    check_target(connection.url)
    password = unseal(connection.secret)["password"]
    with caldav.CalDAVClient(connection.url, connection.username, password) as client:
        yield client


class CalDAVProvider:
    """RFC 6578 sync-collection with the stored token; a refused token means a full resync (logged as
    a snapshot, so events gone meanwhile are tombstoned). Servers without sync-collection: the
    collection's ctag says whether anything changed, and member etags say what."""

    def fetch(self, connection: Connection) -> Fetched:
        with caldav_client(connection) as client:
            if connection.supports_sync:
                return self._fetch_delta(connection, client)
            return self._fetch_by_etags(connection, client)

    def _fetch_delta(self, connection: Connection, client: caldav.CalDAVClient) -> Fetched:
        full = not connection.sync_token
        try:
            delta = client.sync(connection.sync_token or None)
        except caldav.StaleSyncToken:
            delta, full = client.sync(None), True
        records = [
            IngestionRecord(kind=RecordKind.RESOURCE, resource=r.href, etag=r.etag or "", payload=r.data)
            for r in delta.changed
        ]
        records += [IngestionRecord(kind=RecordKind.DELETED, resource=href) for href in delta.deleted]
        if full:
            members = sorted(r.href for r in delta.changed)
            records.append(IngestionRecord(kind=RecordKind.SNAPSHOT, payload=json.dumps(members)))
        with transaction.atomic():
            log_records(connection, records)
            Connection.objects.filter(pk=connection.pk).update(sync_token=delta.sync_token)
        return Fetched(records=len(records), full=full)

    def _fetch_by_etags(self, connection: Connection, client: caldav.CalDAVClient) -> Fetched:
        ctag = client.ctag()
        if ctag and ctag == connection.ctag:
            return Fetched(records=0, full=False)
        etags = client.etags()
        known = dict(
            UpstreamEvent.objects.filter(connection=connection, deleted_at=None).values_list(
                "resource", "etag"
            )
        )
        changed = [href for href, etag in etags.items() if known.get(href) != etag]
        records = [
            IngestionRecord(kind=RecordKind.RESOURCE, resource=r.href, etag=r.etag or "", payload=r.data)
            for r in client.fetch(changed)
        ]
        records.append(IngestionRecord(kind=RecordKind.SNAPSHOT, payload=json.dumps(sorted(etags))))
        with transaction.atomic():
            log_records(connection, records)
            Connection.objects.filter(pk=connection.pk).update(ctag=ctag or "")
        return Fetched(records=len(records), full=True)

    def put(
        self, connection: Connection, name: str, ics: str, *, create: bool, etag: str | None
    ) -> str | None:
        with caldav_client(connection) as client:
            return client.put(name, ics, create_only=create, if_match=None if create else etag)

    def remove(self, connection: Connection, name: str) -> None:
        with caldav_client(connection) as client:
            client.delete(name)


def provider_for(connection: Connection) -> UpstreamProvider:
    if connection.provider == Provider.CALDAV:
        return CalDAVProvider()
    raise UpstreamUnreachable(f"No {connection.provider} support in this version.")
