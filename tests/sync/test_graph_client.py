"""The Microsoft Graph client and the OAuth flow against the fake Microsoft 365 (tests/sync/graph_fake.py):
consent and code exchange with PKCE, refresh and revocation, calendars, calendarView delta with a person
editing in Outlook, idempotent creates, throttling, subscriptions with their validation handshake, change
and lifecycle notifications. No database."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from sync.providers import microsoft_client as microsoft
from sync.providers.errors import (
    GrantRevoked,
    NotFound,
    SyncTokenRefused,
    Throttled,
    Unauthorized,
    Unavailable,
    UpstreamError,
)
from sync.providers.microsoft_client import (
    MAX_SUBSCRIPTION_MINUTES,
    DeltaPage,
    GraphCalendarClient,
    Tokens,
    transaction_id_for,
)
from tests.sync.graph_fake import CLIENT_ID, CLIENT_SECRET, DEFAULT_ACCOUNT, GraphFake, NotificationReceiver

TENANT = "common"
REDIRECT_URI = "https://agentcal.example/sync/microsoft/callback"
WINDOW_START = datetime(2030, 1, 1, tzinfo=UTC)
WINDOW_END = datetime(2030, 3, 1, tzinfo=UTC)


def at(day: int, hour: int, *, month: int = 1, zone: str = "UTC") -> dict[str, str]:
    return {"dateTime": f"2030-{month:02d}-{day:02d}T{hour:02d}:00:00", "timeZone": zone}


def outlook_event(subject: str, day: int, hour: int = 9, *, month: int = 1) -> dict[str, Any]:
    return {"subject": subject, "start": at(day, hour, month=month), "end": at(day, hour + 1, month=month)}


@pytest.fixture
def fake() -> Iterator[GraphFake]:
    server = GraphFake(redirect_uris={REDIRECT_URI})
    server.add_calendar(DEFAULT_ACCOUNT, "cal-work", "Calendar", is_default=True)
    yield server
    server.close()


@pytest.fixture
def subscriber() -> Iterator[NotificationReceiver]:
    endpoint = NotificationReceiver()
    yield endpoint
    endpoint.close()


@pytest.fixture
def client(fake: GraphFake) -> Iterator[GraphCalendarClient]:
    with GraphCalendarClient(fake.issue_tokens()["access_token"], api_url=fake.api_url, timeout=5) as graph:
        yield graph


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action, self.fields, self.buttons = "", dict[str, str](), list[str]()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = {key: value or "" for key, value in attrs}
        if tag == "form":
            self.action = named["action"]
        elif tag == "input":
            self.fields[named["name"]] = named.get("value", "")
        elif tag == "button":
            self.buttons.append(named["id"])


def consent(fake: GraphFake, url: str, *, allow: bool = True) -> dict[str, str]:
    """Opens the consent page and presses Accept (or Cancel) as a browser would; returns the query the
    identity platform redirects back with."""
    with httpx.Client(trust_env=False) as browser:
        page = browser.get(url)
        assert page.status_code == 200
        form = _Form()
        form.feed(page.text)
        assert {"allow", "deny"} <= set(form.buttons)
        answer = browser.post(
            fake.url + form.action, data={**form.fields, "consent": "allow" if allow else "deny"}
        )
    assert answer.status_code == 302
    location = answer.headers["Location"]
    assert location.startswith(REDIRECT_URI + "?")
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def sign_in(fake: GraphFake) -> tuple[str, dict[str, str]]:
    verifier, challenge = microsoft.pkce_pair()
    url = microsoft.authorization_url(
        authority_url=fake.url, tenant=TENANT, client_id=CLIENT_ID, redirect_uri=REDIRECT_URI,
        state="state-123", code_challenge=challenge,
    )  # fmt: skip
    return verifier, consent(fake, url)


def exchange(fake: GraphFake, code: str, verifier: str) -> Tokens:
    return microsoft.exchange_code(
        authority_url=fake.url, tenant=TENANT, client_id=CLIENT_ID, client_secret=CLIENT_SECRET,
        code=code, code_verifier=verifier, redirect_uri=REDIRECT_URI,
    )  # fmt: skip


def refresh(fake: GraphFake, refresh_token: str) -> Tokens:
    return microsoft.refresh(
        authority_url=fake.url, tenant=TENANT, client_id=CLIENT_ID, client_secret=CLIENT_SECRET,
        refresh_token=refresh_token,
    )  # fmt: skip


def full_round(client: GraphCalendarClient, calendar_id: str) -> tuple[list[DeltaPage], str]:
    pages = [client.delta_page(calendar_id, start=WINDOW_START, end=WINDOW_END, link=None)]
    while pages[-1].next_link:
        pages.append(
            client.delta_page(calendar_id, start=WINDOW_START, end=WINDOW_END, link=pages[-1].next_link)
        )
    assert pages[-1].delta_link
    return pages, pages[-1].delta_link


def changes_since(
    client: GraphCalendarClient, calendar_id: str, delta_link: str
) -> tuple[list[dict[str, Any]], str]:
    pages, link = [client.delta_page(calendar_id, start=WINDOW_START, end=WINDOW_END, link=delta_link)], None
    while pages[-1].next_link:
        pages.append(
            client.delta_page(calendar_id, start=WINDOW_START, end=WINDOW_END, link=pages[-1].next_link)
        )
    link = pages[-1].delta_link
    assert link
    return [item for page in pages for item in page.items], link


# OAuth


def test_the_code_exchange_with_the_right_verifier_gives_tokens_that_read_calendars(fake: GraphFake) -> None:
    verifier, answer = sign_in(fake)
    assert answer["state"] == "state-123"

    tokens = exchange(fake, answer["code"], verifier)

    assert tokens.refresh_token
    assert tokens.scope == "Calendars.ReadWrite"
    assert tokens.expires_at > datetime.now(UTC) + timedelta(minutes=50)
    with GraphCalendarClient(tokens.access_token, api_url=fake.api_url) as graph:
        assert [calendar.id for calendar in graph.calendars()] == ["cal-work"]


def test_a_wrong_verifier_is_refused_and_the_message_shows_neither_code_nor_verifier(fake: GraphFake) -> None:
    _verifier, answer = sign_in(fake)
    wrong_verifier = microsoft.pkce_pair()[0]

    with pytest.raises(GrantRevoked) as caught:
        exchange(fake, answer["code"], wrong_verifier)

    assert (caught.value.status, caught.value.reason) == (400, "invalid_grant")
    assert answer["code"] not in str(caught.value)
    assert wrong_verifier not in str(caught.value)
    assert CLIENT_SECRET not in str(caught.value)


def test_a_code_is_single_use(fake: GraphFake) -> None:
    verifier, answer = sign_in(fake)
    exchange(fake, answer["code"], verifier)

    with pytest.raises(GrantRevoked):
        exchange(fake, answer["code"], verifier)


def test_a_declined_consent_comes_back_as_access_denied_with_the_state(fake: GraphFake) -> None:
    _verifier, challenge = microsoft.pkce_pair()
    url = microsoft.authorization_url(
        authority_url=fake.url, tenant=TENANT, client_id=CLIENT_ID, redirect_uri=REDIRECT_URI,
        state="state-456", code_challenge=challenge,
    )  # fmt: skip

    answer = consent(fake, url, allow=False)

    assert answer["error"] == "access_denied"
    assert answer["state"] == "state-456"
    assert "code" not in answer


def test_the_authorization_url_asks_for_a_code_with_s256_and_the_calendar_scopes() -> None:
    url = microsoft.authorization_url(
        authority_url="https://login.microsoftonline.com", tenant="organizations", client_id="app",
        redirect_uri=REDIRECT_URI, state="s", code_challenge="c",
    )  # fmt: skip

    parts = urlsplit(url)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    assert parts.path == "/organizations/oauth2/v2.0/authorize"
    assert query["response_type"] == "code"
    assert query["response_mode"] == "query"
    assert query["code_challenge_method"] == "S256"
    assert query["scope"] == "offline_access Calendars.ReadWrite"


def test_a_wrong_client_secret_is_unauthorized(fake: GraphFake) -> None:
    with pytest.raises(Unauthorized) as caught:
        microsoft.refresh(
            authority_url=fake.url, tenant=TENANT, client_id=CLIENT_ID, client_secret="not-the-secret",
            refresh_token=fake.issue_tokens()["refresh_token"],
        )  # fmt: skip

    assert (caught.value.status, caught.value.reason) == (401, "invalid_client")
    assert "not-the-secret" not in str(caught.value)


# Calendars and delta


def test_calendars_follow_the_next_link(fake: GraphFake, client: GraphCalendarClient) -> None:
    for number in range(12):
        fake.add_calendar(DEFAULT_ACCOUNT, f"cal-{number:02d}", f"Shared {number}", can_edit=number % 2 == 0)
    fake.add_calendar("bob@contoso.example", "cal-bob", "Bob's")

    calendars = client.calendars()

    assert len(calendars) == 13
    assert client.calls == 2
    assert [c.id for c in calendars if c.is_default] == ["cal-work"]
    assert {c.id: c.can_edit for c in calendars}["cal-01"] is False
    assert "cal-bob" not in {c.id for c in calendars}


def test_delta_lists_the_window_in_pages_then_only_what_the_person_changed(
    fake: GraphFake, client: GraphCalendarClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(microsoft, "DELTA_PAGE_SIZE", 2)
    kept, moved, deleted = (fake.human_put("cal-work", outlook_event(name, day)) for name, day in
                            [("Kept", 7), ("Moved", 8), ("Deleted", 9)])  # fmt: skip
    fake.human_put("cal-work", outlook_event("After the window", 1, month=3))
    berlin = {"start": at(10, 12, zone="Europe/Berlin"), "end": at(10, 13, zone="Europe/Berlin")}
    fake.human_put("cal-work", outlook_event("Berlin lunch", 10) | berlin)

    pages, delta_link = full_round(client, "cal-work")

    assert [len(page.items) for page in pages] == [2, 2]
    assert all(page.delta_link is None for page in pages[:-1])
    listed = {item["subject"]: item for page in pages for item in page.items}
    assert set(listed) == {"Kept", "Moved", "Deleted", "Berlin lunch"}
    assert listed["Berlin lunch"]["start"] == {"dateTime": "2030-01-10T11:00:00.0000000", "timeZone": "UTC"}

    fake.human_put("cal-work", {"id": moved["id"], "start": at(8, 15), "end": at(8, 16)})
    fake.human_delete("cal-work", deleted["id"])
    added = fake.human_put("cal-work", outlook_event("Added", 11))

    changes, next_delta_link = changes_since(client, "cal-work", delta_link)

    by_id = {item["id"]: item for item in changes}
    assert set(by_id) == {moved["id"], deleted["id"], added["id"]}
    assert by_id[moved["id"]]["start"]["dateTime"] == "2030-01-08T15:00:00.0000000"
    assert by_id[deleted["id"]]["@removed"] == {"reason": "deleted"}
    assert kept["id"] not in by_id
    assert changes_since(client, "cal-work", next_delta_link)[0] == []


def test_delta_shows_a_weekly_series_as_its_occurrences_and_a_deleted_one_as_removed(
    fake: GraphFake, client: GraphCalendarClient
) -> None:
    series = outlook_event("Standup", 7) | {
        "recurrence": {
            "pattern": {"type": "weekly", "interval": 1, "daysOfWeek": ["monday"]},
            "range": {"type": "numbered", "startDate": "2030-01-07", "numberOfOccurrences": 4},
        }
    }
    master = fake.human_put("cal-work", series)
    pages, delta_link = full_round(client, "cal-work")
    occurrences = [item for page in pages for item in page.items]

    assert [item["start"]["dateTime"][:10] for item in occurrences] == [
        "2030-01-07", "2030-01-14", "2030-01-21", "2030-01-28",
    ]  # fmt: skip
    assert {(item["type"], item["seriesMasterId"]) for item in occurrences} == {("occurrence", master["id"])}

    fake.human_delete("cal-work", occurrences[1]["id"])
    changes, _ = changes_since(client, "cal-work", delta_link)

    removed = [item["id"] for item in changes if "@removed" in item]
    assert removed == [occurrences[1]["id"]]


def test_a_delta_link_the_service_no_longer_knows_is_delta_token_invalid(
    fake: GraphFake, client: GraphCalendarClient
) -> None:
    fake.human_put("cal-work", outlook_event("Kept", 7))
    _pages, delta_link = full_round(client, "cal-work")
    fake.expire_delta_tokens()

    with pytest.raises(SyncTokenRefused) as caught:
        client.delta_page("cal-work", start=WINDOW_START, end=WINDOW_END, link=delta_link)

    assert (caught.value.status, caught.value.reason) == (410, "SyncStateNotFound")
    assert "deltatoken" not in str(caught.value).lower()


@pytest.mark.parametrize("code", ["syncStateNotFound", "resyncRequired"])
def test_a_400_refusing_the_link_is_delta_token_invalid_but_not_on_a_first_request(
    fake: GraphFake, client: GraphCalendarClient, code: str
) -> None:
    _pages, delta_link = full_round(client, "cal-work")
    fake.fail_next(400, code=code, times=2, path_contains="calendarView")

    with pytest.raises(SyncTokenRefused):
        client.delta_page("cal-work", start=WINDOW_START, end=WINDOW_END, link=delta_link)
    with pytest.raises(UpstreamError) as caught:
        client.delta_page("cal-work", start=WINDOW_START, end=WINDOW_END, link=None)
    assert type(caught.value) is UpstreamError


def test_the_first_delta_request_needs_the_window(fake: GraphFake) -> None:
    token = fake.issue_tokens()["access_token"]
    answer = httpx.get(
        f"{fake.api_url}/me/calendars/cal-work/calendarView/delta",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "ErrorInvalidParameter"


def test_a_link_to_another_origin_is_not_followed(fake: GraphFake, client: GraphCalendarClient) -> None:
    with pytest.raises(UpstreamError):
        client.delta_page(
            "cal-work", start=WINDOW_START, end=WINDOW_END, link="https://elsewhere.example/steal"
        )

    assert client.calls == 0


# Writes


def test_a_create_retried_with_the_same_transaction_id_makes_one_event(
    fake: GraphFake, client: GraphCalendarClient
) -> None:
    event = outlook_event("Call with Acme", 14) | {"transactionId": transaction_id_for("bk_01HZX")}

    first = client.create("cal-work", event)
    second = client.create("cal-work", event)

    assert first["id"] == second["id"]
    assert [stored["subject"] for stored in fake.events("cal-work")] == ["Call with Acme"]
    assert first["transactionId"] == transaction_id_for("bk_01HZX")


def test_a_transaction_id_is_a_stable_guid_per_booking() -> None:
    assert transaction_id_for("bk_1") == transaction_id_for("bk_1")
    assert transaction_id_for("bk_1") != transaction_id_for("bk_2")
    assert len(transaction_id_for("bk_1")) == 36


def test_a_create_without_transaction_id_is_refused_before_sending(client: GraphCalendarClient) -> None:
    with pytest.raises(ValueError):
        client.create("cal-work", outlook_event("Untracked", 14))
    assert client.calls == 0


def test_update_changes_the_event_and_delete_says_whether_it_deleted(
    fake: GraphFake, client: GraphCalendarClient
) -> None:
    created = client.create(
        "cal-work", outlook_event("Call", 14) | {"transactionId": transaction_id_for("bk_2")}
    )

    updated = client.update(created["id"], {"showAs": "tentative"})

    assert updated["showAs"] == "tentative"
    assert updated["changeKey"] != created["changeKey"]
    assert client.delete(created["id"]) is True
    assert client.delete(created["id"]) is False
    assert fake.events("cal-work") == []


@pytest.mark.parametrize(
    ("status", "retry_after", "error", "seconds"),
    [
        (429, 7, Throttled, 7.0),
        (429, None, Throttled, None),
        (503, 3, Throttled, 3.0),
        (503, None, Unavailable, None),
        (500, None, Unavailable, None),
    ],
)
def test_throttling_and_outages_carry_the_wait(
    fake: GraphFake,
    client: GraphCalendarClient,
    status: int,
    retry_after: int | None,
    error: type[UpstreamError],
    seconds: float | None,
) -> None:
    fake.fail_next(status, retry_after=retry_after, path_contains="/events")

    with pytest.raises(error) as caught:
        client.create("cal-work", outlook_event("Call", 14) | {"transactionId": transaction_id_for("bk_3")})

    assert type(caught.value) is error
    assert (caught.value.status, caught.value.retry_after) == (status, seconds)
    assert fake.count("/events") == 1


# Subscriptions and notifications


def subscribe(
    client: GraphCalendarClient, subscriber: NotificationReceiver, **overrides: Any
) -> microsoft.Subscription:
    arguments: dict[str, Any] = {
        "resource": "me/calendars/cal-work/events",
        "notification_url": f"{subscriber.url}/sync/microsoft/notifications",
        "lifecycle_url": f"{subscriber.url}/sync/microsoft/lifecycle",
        "client_state": "per-connection-secret",
        "expiration": datetime.now(UTC) + timedelta(days=2),
    }
    return client.subscribe(**(arguments | overrides))


def test_subscribing_validates_both_urls_by_echoing_the_token(
    fake: GraphFake, client: GraphCalendarClient, subscriber: NotificationReceiver
) -> None:
    subscription = subscribe(client, subscriber)

    assert len(subscriber.validations) == 2
    assert all(
        token.startswith("Validation: ") for token in subscriber.validations
    )  # decoded, spaces and all
    assert subscription.expiration > datetime.now(UTC) + timedelta(days=1)
    stored = fake.subscription(subscription.id)
    assert stored is not None
    assert stored.client_state == "per-connection-secret"
    assert stored.change_types == {"created", "updated", "deleted"}


def test_an_endpoint_that_does_not_echo_the_token_gets_no_subscription(
    fake: GraphFake, client: GraphCalendarClient
) -> None:
    silent = NotificationReceiver(echo=False)
    try:
        with pytest.raises(UpstreamError) as caught:
            subscribe(client, silent)
    finally:
        silent.close()

    assert (caught.value.status, caught.value.reason) == (400, "ValidationError")
    assert [delivery.status for delivery in fake.deliveries] == [404]


def test_a_subscription_beyond_the_documented_maximum_is_refused(
    client: GraphCalendarClient, subscriber: NotificationReceiver
) -> None:
    too_far = datetime.now(UTC) + timedelta(minutes=MAX_SUBSCRIPTION_MINUTES + 5)

    with pytest.raises(UpstreamError) as caught:
        subscribe(client, subscriber, expiration=too_far)

    assert caught.value.status == 400


def test_a_change_in_outlook_is_notified_with_the_client_state(
    fake: GraphFake, client: GraphCalendarClient, subscriber: NotificationReceiver
) -> None:
    subscription = subscribe(client, subscriber)

    event = fake.human_put("cal-work", outlook_event("Dentist", 15))
    fake.wait_for_deliveries(1, kind="notification")

    [(path, payload)] = subscriber.received
    [notification] = payload["value"]
    assert path == "/sync/microsoft/notifications"
    assert notification["subscriptionId"] == subscription.id
    assert notification["clientState"] == "per-connection-secret"
    assert notification["changeType"] == "created"
    assert notification["resourceData"]["id"] == event["id"]
    assert notification["resourceData"]["@odata.type"] == "#Microsoft.Graph.Event"


def test_renew_extends_the_subscription_and_unsubscribe_ends_it(
    fake: GraphFake, client: GraphCalendarClient, subscriber: NotificationReceiver
) -> None:
    subscription = subscribe(client, subscriber, expiration=datetime.now(UTC) + timedelta(hours=1))

    renewed = client.renew(subscription.id, datetime.now(UTC) + timedelta(days=6))

    assert renewed.id == subscription.id
    assert renewed.expiration > subscription.expiration + timedelta(days=5)
    client.unsubscribe(subscription.id)
    assert fake.subscription(subscription.id) is None
    with pytest.raises(NotFound):
        client.renew(subscription.id, datetime.now(UTC) + timedelta(days=1))


@pytest.mark.parametrize("event", ["reauthorizationRequired", "subscriptionRemoved", "missed"])
def test_lifecycle_events_reach_the_lifecycle_url(
    fake: GraphFake, client: GraphCalendarClient, subscriber: NotificationReceiver, event: str
) -> None:
    subscription = subscribe(client, subscriber)

    fake.lifecycle(subscription.id, event)
    fake.wait_for_deliveries(1, kind="lifecycle")

    [(path, payload)] = subscriber.received
    [notice] = payload["value"]
    assert path == "/sync/microsoft/lifecycle"
    assert notice["lifecycleEvent"] == event
    assert notice["subscriptionId"] == subscription.id
    assert notice["clientState"] == "per-connection-secret"
    if event == "subscriptionRemoved":
        with pytest.raises(NotFound):
            client.renew(subscription.id, datetime.now(UTC) + timedelta(days=1))
    elif event == "reauthorizationRequired":
        client.renew(subscription.id, datetime.now(UTC) + timedelta(days=1))
        stored = fake.subscription(subscription.id)
        assert stored is not None
        assert stored.reauthorization_required is False
