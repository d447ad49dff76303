"""Fixtures for any test: a Radicale server per test process and a person editing a calendar on it; fakes of
Google Calendar and Microsoft 365."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sync.google_fake import GoogleFake
from tests.sync.graph_fake import GraphFake
from tests.sync.radicale import DEFAULT_PASSWORD, DEFAULT_USER, CalDAVAccount, Human, RadicaleServer


@pytest.fixture(scope="session")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadicaleServer]:
    server = RadicaleServer(tmp_path_factory.mktemp("radicale"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def caldav_calendar(radicale: RadicaleServer) -> CalDAVAccount:
    return CalDAVAccount(
        radicale.new_calendar(DEFAULT_USER, DEFAULT_PASSWORD), DEFAULT_USER, DEFAULT_PASSWORD
    )


@pytest.fixture
def human(caldav_calendar: CalDAVAccount) -> Iterator[Human]:
    person = Human(caldav_calendar)
    yield person
    person.close()


@pytest.fixture
def google_fake() -> Iterator[GoogleFake]:
    fake = GoogleFake()
    yield fake
    fake.close()


@pytest.fixture
def graph_fake() -> Iterator[GraphFake]:
    fake = GraphFake()
    yield fake
    fake.close()
