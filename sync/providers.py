"""Providers: how each kind of upstream calendar is read into the ingestion log and written to.

A provider never touches blocks: `fetch` appends raw payloads to the log (with the provider's new
change marker, in one transaction), and sync.ingest turns the log into blocks. Write-behind
(sync.writeback) creates, updates and removes copies of our bookings through `*_copy`; a create never
overwrites, so a second create of one booking finds the first (AlreadyThere is not an error).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import httpx
from django.conf import settings
from django.db import transaction

from agentcal.errors import UnsafeUpstreamUrl, UnsafeWebhookUrl, UpstreamUnreachable
from sync import caldav
from sync.credentials import unseal
from sync.ical import booking_ics
from sync.ingest import log_records
from sync.models import Connection, IngestionRecord, Provider, RecordKind, UpstreamEvent
from webhooks.url_guard import parse_webhook_url, resolve_pinned


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


def store_marker(connection: Connection, lease_token: str | None, **marker: str) -> None:
    """Save the provider's new change marker with the records, if this run still holds the lease."""
    updated = Connection.objects.filter(pk=connection.pk)
    if lease_token is not None:
        updated = updated.filter(lease_token=lease_token)
    if not updated.update(**marker):
        raise LeaseLost(connection.public_id)


class UpstreamProvider(Protocol):
    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched: ...
    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        """Write a new copy; returns its name upstream and its version (None if already there)."""
        ...

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None: ...
    def remove_copy(self, connection: Connection, name: str) -> None: ...
    def close_push(self, connection: Connection) -> None:
        """Stop the provider's push notifications to us (nothing to do for a polled provider)."""
        ...


def check_target(url: str) -> str:
    """Check an upstream URL and return the address to connect to. The person connecting chooses the
    URL, like a webhook URL, so the same rules apply (webhooks/url_guard.py): it must reach no private
    address, and the client connects to the address checked here, never resolving again (DNS
    rebinding). It must be https (app passwords travel in it). SYNC_ALLOW_PRIVATE_TARGETS (a server on
    the LAN, development) lifts the address rule and allows plain http."""
    allow_private = settings.SYNC_ALLOW_PRIVATE_TARGETS
    try:
        target = parse_webhook_url(url)
        if target.url.scheme != "https" and not allow_private:
            raise UnsafeWebhookUrl("only https URLs are allowed (the credentials travel with each request)")
        return resolve_pinned(target.host, target.port, allow_private=allow_private)
    except UnsafeWebhookUrl as exc:
        raise UnsafeUpstreamUrl(f"The calendar URL cannot be used: {exc.detail}") from None


class _PinnedTransport(httpx.HTTPTransport):
    """Sends every request to one checked address; the Host header, TLS server name and certificate
    check keep the URL's host name."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "https":
            request.extensions["sni_hostname"] = request.url.host
        request.url = request.url.copy_with(host=self.address)
        return super().handle_request(request)


def open_caldav(url: str, username: str, password: str) -> caldav.CalDAVClient:
    """A CalDAV client for an upstream URL that passes check_target(), pinned to the checked address."""
    return caldav.CalDAVClient(url, username, password, transport=_PinnedTransport(check_target(url)))


@contextmanager
def caldav_client(connection: Connection) -> Iterator[caldav.CalDAVClient]:
    password = unseal(connection.secret)["password"]
    with open_caldav(connection.url, connection.username, password) as client:
        yield client


class CalDAVProvider:
    """RFC 6578 sync-collection with the stored token; a refused token means a full resync (logged as
    a snapshot, so events gone meanwhile are tombstoned). Servers without sync-collection: the
    collection's ctag says whether anything changed, and member etags say what."""

    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched:
        with caldav_client(connection) as client:
            if connection.supports_sync:
                return self._fetch_delta(connection, client, lease_token)
            return self._fetch_by_etags(connection, client, lease_token)

    def _fetch_delta(
        self, connection: Connection, client: caldav.CalDAVClient, lease_token: str | None
    ) -> Fetched:
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
            store_marker(connection, lease_token, sync_token=delta.sync_token)
        return Fetched(records=len(records), full=full)

    def _fetch_by_etags(
        self, connection: Connection, client: caldav.CalDAVClient, lease_token: str | None
    ) -> Fetched:
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
            store_marker(connection, lease_token, ctag=ctag or "")
        return Fetched(records=len(records), full=True)

    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        name = f"{copy.booking_id}.ics"
        with caldav_client(connection) as client:
            try:
                return name, client.put(name, _ics(copy), create_only=True)
            except caldav.PreconditionFailed:
                return name, None  # already there: an earlier or concurrent run wrote it

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None:
        with caldav_client(connection) as client:
            return client.put(name, _ics(copy))

    def remove_copy(self, connection: Connection, name: str) -> None:
        with caldav_client(connection) as client:
            client.delete(name)

    def close_push(self, connection: Connection) -> None:
        """CalDAV has no push: nothing to stop."""


def _ics(copy: BookingCopy) -> str:
    return booking_ics(
        uid=f"{copy.booking_id}@agentcal",
        start=copy.start,
        end=copy.end,
        summary=copy.summary,
        description=copy.description,
        sequence=copy.sequence,
        stamp=copy.stamp,
        booking_id=copy.booking_id,
    )


def provider_for(connection: Connection) -> UpstreamProvider:
    if connection.provider == Provider.CALDAV:
        return CalDAVProvider()
    if connection.provider == Provider.GOOGLE:
        from sync.google_provider import GoogleProvider  # it builds on this module

        return GoogleProvider()
    if connection.provider == Provider.MICROSOFT:
        from sync.microsoft_provider import MicrosoftProvider  # it builds on this module

        return MicrosoftProvider()
    raise UpstreamUnreachable(f"No {connection.provider} support in this version.")
