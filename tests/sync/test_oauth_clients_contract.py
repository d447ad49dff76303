"""What the Google Calendar client and the Graph client do alike, each against its provider's fake:
access tokens refused once expired, refreshes, revoked grants, missing calendars and an API nobody
answers. How each maps its provider's own answers is in test_google_client.py and test_graph_client.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from sync.providers import google_client, microsoft_client
from sync.providers.errors import GrantRevoked, NotFound, Unauthorized, Unavailable
from tests.sync.google_fake import DEFAULT_ACCOUNT, DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET, GoogleFake
from tests.sync.graph_fake import CLIENT_ID, CLIENT_SECRET, GraphFake
from tests.sync.graph_fake import DEFAULT_ACCOUNT as GRAPH_ACCOUNT

MISSING_CALENDAR = "nobody@example.com"
WINDOW = (datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 2, 1, tzinfo=UTC))


@dataclass
class Kit:
    """One provider's client and fake, and how the scenarios below reach them."""

    fake: Any  # GoogleFake | GraphFake
    client_secret: str
    open_client: Callable[[str, str], AbstractContextManager[Any]]  # (access token, API URL)
    issue_tokens: Callable[[], tuple[str, str]]  # (access token, refresh token)
    refresh: Callable[[str], Any]  # refresh token → Tokens
    read_calendar: Callable[[Any, str], object]
    unauthorized_reason: str  # the reason a refused access token comes with
    rotates_refresh_tokens: bool  # Graph answers a refresh with a new refresh token, Google never does
    revoking_ends_access_tokens: bool  # Google: at once; Graph: they live until they expire

    @property
    def api_url(self) -> str:
        return str(self.fake.api_url)

    def client(self, access_token: str) -> AbstractContextManager[Any]:
        return self.open_client(access_token, self.api_url)


def google_kit(fake: GoogleFake) -> Kit:
    fake.add_calendar(DEFAULT_ACCOUNT, DEFAULT_ACCOUNT, "Alice", primary=True)

    def issue_tokens() -> tuple[str, str]:
        return fake.issue_tokens(scope=google_client.GOOGLE_SCOPES)

    def refresh(refresh_token: str) -> Any:
        return google_client.refresh(
            token_url=fake.token_url, client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET,
            refresh_token=refresh_token,
        )  # fmt: skip

    return Kit(
        fake, DEFAULT_CLIENT_SECRET,
        lambda token, url: google_client.GoogleCalendarClient(token, api_url=url, timeout=2),
        issue_tokens, refresh,
        lambda client, calendar: client.events_page(calendar, sync_token=None, page_token=None),
        "authError", rotates_refresh_tokens=False, revoking_ends_access_tokens=True,
    )  # fmt: skip


def graph_kit(fake: GraphFake) -> Kit:
    fake.add_calendar(GRAPH_ACCOUNT, "cal-work", "Calendar", is_default=True)

    def issue_tokens() -> tuple[str, str]:
        tokens = fake.issue_tokens()
        return tokens["access_token"], tokens["refresh_token"]

    def refresh(refresh_token: str) -> Any:
        return microsoft_client.refresh(
            authority_url=fake.url, tenant="common", client_id=CLIENT_ID, client_secret=CLIENT_SECRET,
            refresh_token=refresh_token,
        )  # fmt: skip

    return Kit(
        fake, CLIENT_SECRET,
        lambda token, url: microsoft_client.GraphCalendarClient(token, api_url=url, timeout=2),
        issue_tokens, refresh,
        lambda client, calendar: client.delta_page(calendar, start=WINDOW[0], end=WINDOW[1], link=None),
        "InvalidAuthenticationToken", rotates_refresh_tokens=True, revoking_ends_access_tokens=False,
    )  # fmt: skip


@pytest.fixture(params=["google", "microsoft"])
def kit(request: pytest.FixtureRequest) -> Iterator[Kit]:
    if request.param == "google":
        google = GoogleFake()
        yield google_kit(google)
        google.close()
    else:
        graph = GraphFake()
        yield graph_kit(graph)
        graph.close()


def test_an_expired_access_token_is_unauthorized_and_not_in_the_message(kit: Kit) -> None:
    access_token, _refresh_token = kit.issue_tokens()
    kit.fake.expire_access_tokens()

    with kit.client(access_token) as client, pytest.raises(Unauthorized) as caught:
        client.calendars()

    assert (caught.value.status, caught.value.reason) == (401, kit.unauthorized_reason)
    assert access_token not in str(caught.value)


def test_a_refresh_gives_a_working_access_token(kit: Kit) -> None:
    access_token, refresh_token = kit.issue_tokens()
    kit.fake.expire_access_tokens()

    renewed = kit.refresh(refresh_token)

    assert renewed.access_token != access_token and renewed.refresh_token
    assert (renewed.refresh_token != refresh_token) == kit.rotates_refresh_tokens
    with kit.client(renewed.access_token) as client:
        assert client.calendars()


def test_a_revoked_grant_refreshes_no_more_with_any_of_its_refresh_tokens(kit: Kit) -> None:
    access_token, first = kit.issue_tokens()
    refresh_tokens = [first]
    if kit.rotates_refresh_tokens:
        refresh_tokens.append(kit.refresh(first).refresh_token)

    kit.fake.revoke(first)

    for refresh_token in refresh_tokens:
        with pytest.raises(GrantRevoked) as caught:
            kit.refresh(refresh_token)
        assert (caught.value.status, caught.value.reason) == (400, "invalid_grant")
        assert caught.value.permanent
        assert refresh_token not in str(caught.value) and kit.client_secret not in str(caught.value)
    with kit.client(access_token) as client:
        if kit.revoking_ends_access_tokens:
            with pytest.raises(Unauthorized):
                client.calendars()
        else:
            assert client.calendars()


def test_a_missing_calendar_is_not_found(kit: Kit) -> None:
    access_token, _refresh_token = kit.issue_tokens()
    with kit.client(access_token) as client, pytest.raises(NotFound):
        kit.read_calendar(client, MISSING_CALENDAR)


def test_an_api_nobody_answers_is_unavailable(kit: Kit) -> None:
    api_url = kit.api_url
    kit.fake.close()  # its port is let go: nothing listens there any more

    with kit.open_client("token", api_url) as client, pytest.raises(Unavailable) as caught:
        client.calendars()
    assert caught.value.status is None
