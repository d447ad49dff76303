"""CalDAV as an upstream provider: polled (no push), read with RFC 6578 sync-collection or, on servers
without it, ctag and etags; our bookings written as `<booking id>.ics` with conditional PUTs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from django.conf import settings

from agentcal.errors import UnsafeUpstreamUrl, UnsafeWebhookUrl
from sync.credentials import unseal
from sync.ical import booking_ics
from sync.models import Connection, IngestionRecord, RecordKind, UpstreamEvent
from sync.providers import caldav_client
from sync.providers.base import BookingCopy, Fetched, record_fetch
from sync.providers.errors import PreconditionFailed, SyncTokenRefused
from webhooks.url_guard import parse_webhook_url, resolve_pinned


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


def open_caldav(url: str, username: str, password: str) -> caldav_client.CalDAVClient:
    """A CalDAV client for an upstream URL that passes check_target(), pinned to the checked address."""
    return caldav_client.CalDAVClient(url, username, password, transport=_PinnedTransport(check_target(url)))


@contextmanager
def caldav_client_for(connection: Connection) -> Iterator[caldav_client.CalDAVClient]:
    password = unseal(connection.secret)["password"]
    with open_caldav(connection.url, connection.username, password) as client:
        yield client


class CalDAVProvider:
    """RFC 6578 sync-collection with the stored token; a refused token means a full resync (logged as
    a snapshot, so events gone meanwhile are tombstoned). Servers without sync-collection: the
    collection's ctag says whether anything changed, and member etags say what."""

    def fetch(self, connection: Connection, *, lease_token: str | None = None) -> Fetched:
        with caldav_client_for(connection) as client:
            if connection.supports_sync:
                return self._fetch_delta(connection, client, lease_token)
            return self._fetch_by_etags(connection, client, lease_token)

    def _fetch_delta(
        self, connection: Connection, client: caldav_client.CalDAVClient, lease_token: str | None
    ) -> Fetched:
        full = not connection.sync_token
        try:
            delta = client.sync(connection.sync_token or None)
        except SyncTokenRefused:
            delta, full = client.sync(None), True
        records = [
            IngestionRecord(kind=RecordKind.RESOURCE, resource=r.href, etag=r.etag or "", payload=r.data)
            for r in delta.changed
        ]
        records += [IngestionRecord(kind=RecordKind.DELETED, resource=href) for href in delta.deleted]
        snapshot = [r.href for r in delta.changed] if full else None
        return record_fetch(
            connection, records, lease_token=lease_token, snapshot=snapshot, sync_token=delta.sync_token
        )

    def _fetch_by_etags(
        self, connection: Connection, client: caldav_client.CalDAVClient, lease_token: str | None
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
        return record_fetch(connection, records, lease_token=lease_token, snapshot=etags, ctag=ctag or "")

    def create_copy(self, connection: Connection, copy: BookingCopy) -> tuple[str, str | None]:
        name = f"{copy.booking_id}.ics"
        with caldav_client_for(connection) as client:
            try:
                return name, client.put(name, _ics(copy), create_only=True)
            except PreconditionFailed:
                return name, None  # already there: an earlier or concurrent run wrote it

    def update_copy(self, connection: Connection, name: str, copy: BookingCopy) -> str | None:
        with caldav_client_for(connection) as client:
            return client.put(name, _ics(copy))

    def remove_copy(self, connection: Connection, name: str) -> None:
        with caldav_client_for(connection) as client:
            client.delete(name)


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
