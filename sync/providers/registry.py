"""Which provider serves a connection: the one place that knows every kind of upstream calendar."""

from __future__ import annotations

from agentcal.errors import UpstreamUnreachable
from sync.models import Connection, Provider
from sync.providers.base import UpstreamProvider
from sync.providers.caldav import CalDAVProvider
from sync.providers.google import GoogleProvider
from sync.providers.microsoft import MicrosoftProvider

PROVIDERS: dict[str, type[UpstreamProvider]] = {
    Provider.CALDAV: CalDAVProvider,
    Provider.GOOGLE: GoogleProvider,
    Provider.MICROSOFT: MicrosoftProvider,
}


def provider_for(connection: Connection) -> UpstreamProvider:
    provider = PROVIDERS.get(connection.provider)
    if provider is None:
        raise UpstreamUnreachable(f"No {connection.provider} support in this version.")
    return provider()
