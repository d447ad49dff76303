"""The sync tests' own fixtures: a calendar linked to the human's Radicale calendar, a faulty proxy in front
of Radicale, and AgentCal's settings for the Google and Microsoft fakes. The Radicale server (one per test
process: each xdist worker is its own process), the person editing a calendar on it and the fakes
themselves are in tests/sync/fixtures.py, which other directories' tests use too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import Persona
from tests.sync.google_fake import GoogleFake
from tests.sync.graph_fake import CLIENT_ID, CLIENT_SECRET, GraphFake
from tests.sync.linking import Linked, link
from tests.sync.oauth_linking import GoogleLinked, MicrosoftLinked, google_link, microsoft_link
from tests.sync.radicale import (
    CalDAVAccount,
    FaultyProxy,
    Human,
    RadicaleServer,
)


@pytest.fixture
def faulty_proxy(radicale: RadicaleServer) -> Iterator[FaultyProxy]:
    """A proxy in front of the session's Radicale; `faulty_proxy.through(url)` routes a URL through it."""
    proxy = FaultyProxy(radicale.url)
    yield proxy
    proxy.close()


@pytest.fixture
def sync_settings(settings: Any) -> Any:
    settings.SYNC_ALLOW_PRIVATE_TARGETS = True  # Radicale listens on 127.0.0.1
    return settings


@pytest.fixture
def linked(sdr: Persona, caldav_calendar: CalDAVAccount, human: Human, sync_settings: Any) -> Linked:
    """The SDR's new calendar, linked through the API to the human's Radicale calendar."""
    return link(sdr, caldav_calendar, human)


@pytest.fixture
def google_settings(settings: Any, google_fake: GoogleFake, live_server: Any) -> Any:
    """AgentCal's Google app registered with the fake, and push delivered to the live server."""
    settings.SYNC_GOOGLE_CLIENT_ID = "agentcal-tests.apps.googleusercontent.com"
    settings.SYNC_GOOGLE_CLIENT_SECRET = "agentcal-tests-secret"
    settings.SYNC_GOOGLE_AUTH_URL = google_fake.auth_url
    settings.SYNC_GOOGLE_TOKEN_URL = google_fake.token_url
    settings.SYNC_GOOGLE_API_URL = google_fake.api_url
    settings.SYNC_PUSH_BASE_URL = live_server.url
    settings.DASHBOARD_BASE_URL = live_server.url
    google_fake.register_client(
        settings.SYNC_GOOGLE_CLIENT_ID,
        settings.SYNC_GOOGLE_CLIENT_SECRET,
        {f"{live_server.url}/oauth/google/callback"},
    )
    return settings


@pytest.fixture
def graph_settings(settings: Any, graph_fake: GraphFake, live_server: Any) -> Any:
    """AgentCal's Microsoft app registered with the fake, and notifications delivered to the live server."""
    settings.SYNC_MICROSOFT_CLIENT_ID = CLIENT_ID
    settings.SYNC_MICROSOFT_CLIENT_SECRET = CLIENT_SECRET
    settings.SYNC_MICROSOFT_TENANT = "common"
    settings.SYNC_MICROSOFT_AUTHORITY_URL = graph_fake.url
    settings.SYNC_MICROSOFT_API_URL = graph_fake.api_url
    settings.SYNC_PUSH_BASE_URL = live_server.url
    settings.DASHBOARD_BASE_URL = live_server.url
    graph_fake.redirect_uris = {f"{live_server.url}/oauth/microsoft/callback"}
    return settings


@pytest.fixture
def glinked(sdr: Persona, google_fake: GoogleFake, google_settings: Any, live_server: Any) -> GoogleLinked:
    return google_link(sdr, google_fake, live_server.url)


@pytest.fixture
def mslinked(sdr: Persona, graph_fake: GraphFake, graph_settings: Any, live_server: Any) -> MicrosoftLinked:
    return microsoft_link(sdr, graph_fake, live_server.url)
