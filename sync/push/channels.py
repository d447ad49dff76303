"""Opening, renewing and closing push: Google's channels and Graph's subscriptions, each carrying a
secret only we and the provider know (its hash is on the connection; sync.push.endpoints checks it).

Google (developers.google.com/calendar/api/guides/push): channels cannot be renewed, so a new one is
opened before the old expires, and the old is stopped. Graph (learn.microsoft.com/graph/change-
notifications-delivery-webhooks, -lifecycle-events): a subscription on the calendar's events, renewed
in place (PATCH) a day before it expires.
"""

from __future__ import annotations

import hashlib
import secrets
from contextlib import suppress
from datetime import timedelta
from typing import Protocol

from django.conf import settings

from agentcal.clock import server_now
from sync.models import Connection, Provider
from sync.providers.errors import NotFound, UpstreamError
from sync.providers.google import GoogleProvider
from sync.providers.google_client import GoogleCalendarClient
from sync.providers.microsoft import MicrosoftProvider
from sync.providers.microsoft_client import MAX_SUBSCRIPTION_MINUTES

# The longest channel Google grants for events (it may grant less; the answer's expiration counts).
CHANNEL_TTL = timedelta(days=7)
# The lifetime asked for a subscription: three days at most (the brief renewal margin is one day, so
# two days of missed renewals still leave it open), and within both the documented maximum and the
# 4,230 minutes older versions of that page gave, in case a tenant still enforces those.
SUBSCRIPTION_TTL = min(
    timedelta(minutes=MAX_SUBSCRIPTION_MINUTES), timedelta(days=3), timedelta(minutes=4230)
)


class PushChannel(Protocol):
    def keep_open(self, connection: Connection) -> None:
        """Open the connection's push (it has none, or it expires soon), replacing or renewing its own."""
        ...

    def close(self, connection: Connection) -> None: ...


def push_secret_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def push_channel_for(connection: Connection) -> PushChannel | None:
    """The connection's kind of push; None for a provider that has none (CalDAV: polled)."""
    return _CHANNELS.get(connection.provider)


class GoogleChannels:
    def keep_open(self, connection: Connection) -> None:
        """Open a new push channel for the calendar (stopping the one it replaces): notifications to
        SYNC_PUSH_BASE_URL/hooks/google, each carrying a secret only we and Google know."""
        token = secrets.token_urlsafe(32)
        channel_id = f"agentcal-{secrets.token_hex(12)}"
        old = (connection.push_id, connection.push_resource_id)
        # Saved before asking: Google's `sync` handshake may arrive before watch() has answered.
        Connection.objects.filter(pk=connection.pk).update(
            push_id=channel_id, push_resource_id="", push_secret_hash=push_secret_hash(token)
        )
        channel = GoogleProvider().with_client(
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
            self._stop(connection, *old)

    def close(self, connection: Connection) -> None:
        if connection.push_id:
            self._stop(connection, connection.push_id, connection.push_resource_id)

    def _stop(self, connection: Connection, channel_id: str, resource_id: str) -> None:
        def stop(client: GoogleCalendarClient) -> None:
            with suppress(NotFound):  # it had expired already
                client.stop(channel_id=channel_id, resource_id=resource_id)

        GoogleProvider().with_client(connection, stop)


class GraphSubscriptions:
    def keep_open(self, connection: Connection) -> None:
        """Move the subscription's expiry on (this also answers a reauthorizationRequired); one Graph no
        longer knows is replaced by a new one."""
        if not connection.push_id:
            self._open(connection)
            return
        subscription_id, expiration = connection.push_id, server_now() + SUBSCRIPTION_TTL
        try:
            subscription = MicrosoftProvider().with_client(
                connection, lambda client: client.renew(subscription_id, expiration)
            )
        except NotFound:
            Connection.objects.filter(pk=connection.pk, push_id=subscription_id).update(push_id="")
            connection.push_id = ""
            self._open(connection)
            return
        Connection.objects.filter(pk=connection.pk, push_id=connection.push_id).update(
            push_expires_at=subscription.expiration
        )

    def close(self, connection: Connection) -> None:
        if connection.push_id:
            with suppress(NotFound):  # it had expired already
                MicrosoftProvider().with_client(
                    connection, lambda client: client.unsubscribe(connection.push_id)
                )

    def _open(self, connection: Connection) -> None:
        """Subscribe to changes of the calendar's events: notifications to SYNC_PUSH_BASE_URL/hooks/microsoft,
        lifecycle events to …/lifecycle, each carrying a secret (clientState) only we and Graph know. The
        one it replaces, if any, is deleted.

        Graph assigns the subscription's id, and before answering it checks both URLs with a validation
        request that carries neither id nor clientState: the endpoints echo it without looking anything up
        (sync.push.endpoints), so nothing needs saving beforehand."""
        client_state = secrets.token_urlsafe(32)
        old = connection.push_id
        base = settings.SYNC_PUSH_BASE_URL
        expiration = server_now() + SUBSCRIPTION_TTL
        provider = MicrosoftProvider()
        subscription = provider.with_client(
            connection,
            lambda client: client.subscribe(
                resource=f"me/calendars/{connection.remote_calendar_id}/events",
                notification_url=f"{base}/hooks/microsoft",
                lifecycle_url=f"{base}/hooks/microsoft/lifecycle",
                client_state=client_state,
                expiration=expiration,
            ),
        )
        Connection.objects.filter(pk=connection.pk).update(
            push_id=subscription.id,
            push_resource_id="",
            push_secret_hash=push_secret_hash(client_state),
            push_expires_at=subscription.expiration,
        )
        if old and old != subscription.id:
            try:
                provider.with_client(connection, lambda client: client.unsubscribe(old))
            except UpstreamError as exc:
                if exc.permanent:
                    raise
                # expired or removed already: nothing to delete


_CHANNELS: dict[str, PushChannel] = {
    Provider.GOOGLE: GoogleChannels(),
    Provider.MICROSOFT: GraphSubscriptions(),
}
