"""The Google Calendar client against the local Google fake (tests/sync/google_fake.py): the OAuth code
exchange with PKCE through the consent page, refreshes and revoked grants, the calendar list, full and
incremental sync, conditional writes, throttling, and push channels delivered to a real local receiver.
What every OAuth client does alike is in test_oauth_clients_contract.py."""

from __future__ import annotations

import email.utils
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from sync.providers.errors import (
    Conflict,
    GrantRevoked,
    PreconditionFailed,
    SyncTokenRefused,
    Throttled,
    Unavailable,
    UpstreamError,
)
from sync.providers.google_client import (
    GOOGLE_SCOPES,
    GoogleCalendarClient,
    authorization_url,
    booking_id_from,
    event_id_for,
    exchange_code,
    pkce_pair,
)
from tests.sync.fake_http import FakeHTTPServer, FakeRequest, Reply
from tests.sync.google_fake import DEFAULT_ACCOUNT, DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET, GoogleFake

REDIRECT_URI = "https://agentcal.test/connections/google/callback"
PRIMARY = DEFAULT_ACCOUNT
TEAM = "team-standup@group.calendar.google.com"
MONDAY_9 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


def timed(summary: str, start: datetime, minutes: int = 30, **extra: Any) -> dict[str, Any]:
    return {
        "summary": summary,
        "start": {"dateTime": start.isoformat()},
        "end": {"dateTime": (start + timedelta(minutes=minutes)).isoformat()},
        **extra,
    }


def booking_ids(count: int) -> list[str]:
    """Booking ids as the product makes them: bk_ and twenty characters of [a-z0-9]."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return ["bk_" + "".join(secrets.choice(alphabet) for _ in range(20)) for _ in range(count)]


@pytest.fixture
def google() -> Iterator[GoogleFake]:
    fake = GoogleFake()
    fake.register_client(DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET, {REDIRECT_URI})
    fake.add_calendar(DEFAULT_ACCOUNT, PRIMARY, "Alice", primary=True)
    fake.add_calendar(DEFAULT_ACCOUNT, TEAM, "Team stand-ups", access_role="writer")
    yield fake
    fake.close()
    assert fake.errors == []


@pytest.fixture
def client(google: GoogleFake) -> Iterator[GoogleCalendarClient]:
    access_token, _refresh_token = google.issue_tokens(scope=GOOGLE_SCOPES)
    with GoogleCalendarClient(access_token, api_url=google.api_url, timeout=5) as calendar_client:
        yield calendar_client


@dataclass
class Notification:
    headers: dict[str, str]
    body: bytes


class PushReceiver(FakeHTTPServer):
    """Where AgentCal would receive Google's notifications: records each request and answers 200.
    `hook_url` is the address a channel is opened with."""

    def __init__(self) -> None:
        self.received: list[Notification] = []
        super().__init__()
        self.hook_url = f"{self.url}/hooks/google"

    def route(self, request: FakeRequest) -> Reply:
        with self._lock:
            self.received.append(
                Notification({k.lower(): v for k, v in request.headers.items()}, request.body)
            )
        return 200, {}, b""

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Notification]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.01)
        raise AssertionError(f"expected {count} notification(s), got {len(self.received)}")


@pytest.fixture
def push_receiver() -> Iterator[PushReceiver]:
    receiver = PushReceiver()
    yield receiver
    receiver.close()


def connect(google: GoogleFake) -> tuple[str, str, str]:
    """Runs the consent page as a browser would: (code, state, the verifier that matches the challenge)."""
    real_verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(16)
    url = authorization_url(
        auth_url=google.auth_url, client_id=DEFAULT_CLIENT_ID, redirect_uri=REDIRECT_URI,
        state=state, code_challenge=challenge,
    )  # fmt: skip
    location = google.consent(url)
    assert location.startswith(REDIRECT_URI + "?")
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == [state]
    return query["code"][0], state, real_verifier


def exchange(google: GoogleFake, code: str, verifier: str) -> Any:
    return exchange_code(
        token_url=google.token_url, client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET,
        code=code, code_verifier=verifier, redirect_uri=REDIRECT_URI,
    )  # fmt: skip


def full_sync(client: GoogleCalendarClient, calendar_id: str) -> tuple[list[dict[str, Any]], str, int]:
    """Every page of a full listing: (items, the sync token, how many pages)."""
    items: list[dict[str, Any]] = []
    page_token: str | None = None
    pages = 0
    while True:
        page = client.events_page(calendar_id, sync_token=None, page_token=page_token)
        pages += 1
        items += page.items
        if page.next_page_token is None:
            assert page.next_sync_token
            return items, page.next_sync_token, pages
        assert page.next_sync_token is None
        page_token = page.next_page_token


def changes(
    client: GoogleCalendarClient, calendar_id: str, sync_token: str
) -> tuple[list[dict[str, Any]], str]:
    items: list[dict[str, Any]] = []
    page_token: str | None = None
    while True:
        page = client.events_page(calendar_id, sync_token=sync_token, page_token=page_token)
        items += page.items
        if page.next_page_token is None:
            assert page.next_sync_token
            return items, page.next_sync_token
        page_token = page.next_page_token


# -- OAuth ---------------------------------------------------------------------------------------------


def test_the_authorization_url_asks_for_offline_access_with_pkce() -> None:
    url = authorization_url(
        auth_url="https://accounts.google.com/o/oauth2/v2/auth", client_id="cid", redirect_uri=REDIRECT_URI,
        state="st", code_challenge="ch",
    )  # fmt: skip
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}

    assert query["response_type"] == "code"
    assert query["access_type"] == "offline"
    assert query["prompt"] == "consent"
    assert query["code_challenge_method"] == "S256"
    assert query["include_granted_scopes"] == "true"
    assert set(query["scope"].split()) == {
        "https://www.googleapis.com/auth/calendar.events",
        "https://www.googleapis.com/auth/calendar.readonly",
    }


def test_pkce_pair_is_an_rfc_7636_verifier_and_its_s256_challenge() -> None:
    verifier, challenge = pkce_pair()

    assert re.fullmatch(r"[A-Za-z0-9\-._~]{43,128}", verifier)
    assert re.fullmatch(r"[A-Za-z0-9\-_]{43}", challenge)
    assert pkce_pair()[0] != verifier


def test_it_exchanges_a_consented_code_for_tokens_that_work(google: GoogleFake) -> None:
    code, _state, verifier = connect(google)

    tokens = exchange(google, code, verifier)

    assert tokens.refresh_token
    assert set(tokens.scope.split()) == set(GOOGLE_SCOPES.split())
    assert timedelta(minutes=59) < tokens.expires_at - datetime.now(UTC) <= timedelta(hours=1)
    assert tokens.access_token not in repr(tokens) and tokens.refresh_token not in repr(tokens)
    with GoogleCalendarClient(tokens.access_token, api_url=google.api_url) as calendar_client:
        assert [c.id for c in calendar_client.calendars()] == [PRIMARY, TEAM]


def test_a_wrong_verifier_is_refused_and_a_code_works_once(google: GoogleFake) -> None:
    code, _state, verifier = connect(google)
    other_verifier, _challenge = pkce_pair()

    with pytest.raises(UpstreamError) as caught:
        exchange(google, code, other_verifier)

    assert caught.value.status == 400
    assert caught.value.reason == "invalid_grant"
    assert not isinstance(caught.value, GrantRevoked)  # a refused code says nothing of a grant
    for secret in (code, other_verifier, DEFAULT_CLIENT_SECRET):
        assert secret not in str(caught.value)
    assert exchange(google, code, verifier).access_token
    with pytest.raises(UpstreamError, match="invalid_grant"):
        exchange(google, code, verifier)


def test_a_person_who_denies_is_sent_back_with_access_denied(google: GoogleFake) -> None:
    _verifier, challenge = pkce_pair()
    url = authorization_url(
        auth_url=google.auth_url, client_id=DEFAULT_CLIENT_ID, redirect_uri=REDIRECT_URI, state="s1",
        code_challenge=challenge,
    )  # fmt: skip

    location = google.consent(url, allow=False)

    assert parse_qs(urlsplit(location).query) == {"error": ["access_denied"], "state": ["s1"]}


def test_the_consent_page_has_the_allow_and_deny_buttons(google: GoogleFake) -> None:
    _verifier, challenge = pkce_pair()
    url = authorization_url(
        auth_url=google.auth_url, client_id=DEFAULT_CLIENT_ID, redirect_uri=REDIRECT_URI, state="s",
        code_challenge=challenge,
    )  # fmt: skip

    page = httpx.get(url, trust_env=False)
    unregistered = httpx.get(url.replace("agentcal.test", "evil.test"), trust_env=False)

    assert page.status_code == 200
    assert 'id="allow"' in page.text and 'id="deny"' in page.text
    assert unregistered.status_code == 400 and "redirect_uri_mismatch" in unregistered.text


def test_a_token_without_the_readonly_scope_cannot_list_calendars(google: GoogleFake) -> None:
    access_token, _refresh = google.issue_tokens(scope="https://www.googleapis.com/auth/calendar.events")

    with (
        GoogleCalendarClient(access_token, api_url=google.api_url) as calendar_client,
        pytest.raises(UpstreamError) as caught,
    ):
        calendar_client.calendars()

    assert caught.value.status == 403
    assert caught.value.reason == "insufficientPermissions"
    assert not isinstance(caught.value, Throttled)


# -- calendars and sync ----------------------------------------------------------------------------------


def test_it_lists_the_accounts_calendars_across_pages(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    google.page_size = 1

    calendars = client.calendars()

    assert [(c.id, c.summary, c.primary, c.access_role) for c in calendars] == [
        (PRIMARY, "Alice", True, "owner"),
        (TEAM, "Team stand-ups", False, "writer"),
    ]
    assert client.calls == 2


def test_a_full_sync_pages_and_gives_the_sync_token_only_at_the_end(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    made = [google.human_put(PRIMARY, timed(f"Meeting {n}", MONDAY_9 + timedelta(hours=n))) for n in range(5)]
    google.human_delete(PRIMARY, made[4]["id"])
    google.page_size = 2

    items, sync_token, pages = full_sync(client, PRIMARY)

    assert pages == 3
    assert sync_token
    assert [item["id"] for item in items] == [event["id"] for event in made]  # deleted ones too: showDeleted
    assert items[4] == {
        "kind": "calendar#event", "etag": items[4]["etag"], "id": made[4]["id"], "status": "cancelled",
        "updated": items[4]["updated"],
    }  # fmt: skip
    assert google.count("showDeleted=true") == 3


def test_an_incremental_sync_returns_only_the_changes(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    kept = google.human_put(PRIMARY, timed("Kept", MONDAY_9))
    moved = google.human_put(PRIMARY, timed("Moved", MONDAY_9 + timedelta(hours=1)))
    deleted = google.human_put(PRIMARY, timed("Deleted", MONDAY_9 + timedelta(hours=2)))
    series = google.human_put(
        PRIMARY, timed("Stand-up", MONDAY_9 - timedelta(hours=1), 15, recurrence=["RRULE:FREQ=DAILY;COUNT=5"])
    )
    _items, sync_token, _pages = full_sync(client, PRIMARY)

    google.human_put(PRIMARY, {**moved, **timed("Moved", MONDAY_9 + timedelta(hours=3))})
    google.human_delete(PRIMARY, deleted["id"])
    added = google.human_put(PRIMARY, timed("Added", MONDAY_9 + timedelta(days=1)))
    tuesday = MONDAY_9 + timedelta(days=1) - timedelta(hours=1)  # the series' second occurrence, 08:00
    exception = google.human_put(
        PRIMARY,
        timed(
            "Stand-up", tuesday + timedelta(minutes=30), 15, recurringEventId=series["id"],
            originalStartTime={"dateTime": tuesday.isoformat()},
        ),
    )  # fmt: skip
    found, next_token = changes(client, PRIMARY, sync_token)

    by_id = {item["id"]: item for item in found}
    assert set(by_id) == {moved["id"], deleted["id"], added["id"], exception["id"]}
    assert kept["id"] not in by_id and series["id"] not in by_id
    assert by_id[moved["id"]]["start"] == {"dateTime": (MONDAY_9 + timedelta(hours=3)).isoformat()}
    assert by_id[moved["id"]]["sequence"] == 1  # the time moved
    assert by_id[deleted["id"]]["status"] == "cancelled"
    assert exception["id"] == f"{series['id']}_20300108T080000Z"
    assert by_id[exception["id"]]["recurringEventId"] == series["id"]
    assert by_id[exception["id"]]["originalStartTime"] == {"dateTime": tuesday.isoformat()}
    assert by_id[exception["id"]]["iCalUID"] == series["iCalUID"]
    assert changes(client, PRIMARY, next_token)[0] == []


def test_an_invalidated_sync_token_is_sync_token_gone(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    google.human_put(PRIMARY, timed("Dentist", MONDAY_9))
    _items, sync_token, _pages = full_sync(client, PRIMARY)

    google.expire_sync_tokens()

    with pytest.raises(SyncTokenRefused) as caught:
        client.events_page(PRIMARY, sync_token=sync_token, page_token=None)
    assert caught.value.status == 410
    assert caught.value.reason == "fullSyncRequired"
    assert sync_token not in str(caught.value)
    items, _new_token, _pages = full_sync(client, PRIMARY)  # the way back: a full listing
    assert [item["summary"] for item in items] == ["Dentist"]


def test_the_fake_refuses_a_sync_token_with_a_time_filter(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    _items, sync_token, _pages = full_sync(client, PRIMARY)
    access_token, _refresh = google.issue_tokens()

    answer = httpx.get(
        f"{google.api_url}calendars/{PRIMARY}/events",
        params={"syncToken": sync_token, "timeMin": "2030-01-01T00:00:00Z"},
        headers={"Authorization": f"Bearer {access_token}"},
        trust_env=False,
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["errors"][0]["location"] == "timeMin"


# -- writes ------------------------------------------------------------------------------------------------


def test_inserting_the_same_booking_twice_is_a_conflict(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    event_id = event_id_for("bk_0123456789abcdefghij")
    created = client.insert(TEAM, {"id": event_id, **timed("Demo with Acme", MONDAY_9)})

    with pytest.raises(Conflict) as caught:
        client.insert(TEAM, {"id": event_id, **timed("Demo with Acme", MONDAY_9)})

    assert created["id"] == event_id and created["etag"]
    assert caught.value.status == 409 and caught.value.reason == "duplicate"
    assert [event["id"] for event in google.events(TEAM)] == [event_id]
    assert client.delete(TEAM, event_id) is True
    with pytest.raises(Conflict):  # a deleted event keeps its id
        client.insert(TEAM, {"id": event_id, **timed("Demo with Acme", MONDAY_9)})


def test_an_id_outside_base32hex_is_refused(client: GoogleCalendarClient) -> None:
    with pytest.raises(UpstreamError) as caught:
        client.insert(PRIMARY, {"id": "bk_0123456789abcdefghij", **timed("Demo", MONDAY_9)})

    assert caught.value.status == 400
    assert caught.value.reason == "invalid"


def test_an_update_with_a_stale_etag_is_precondition_failed(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    event_id = event_id_for("bk_stale0etag0test0abc")
    created = client.insert(PRIMARY, {"id": event_id, **timed("Demo", MONDAY_9)})
    google.human_put(PRIMARY, {**created, "summary": "Demo (moved by Alice)"})

    with pytest.raises(PreconditionFailed) as caught:
        client.update(PRIMARY, event_id, {**created, "summary": "Demo v2"}, etag=created["etag"])

    assert caught.value.status == 412
    current = client.get(PRIMARY, event_id)
    assert current is not None and current["summary"] == "Demo (moved by Alice)"
    updated = client.update(PRIMARY, event_id, {**current, "summary": "Demo v2"}, etag=current["etag"])
    assert updated["summary"] == "Demo v2" and updated["etag"] != current["etag"]


def test_deleting_twice_is_true_then_false(google: GoogleFake, client: GoogleCalendarClient) -> None:
    event_id = event_id_for("bk_delete0twice0abcdef")
    client.insert(PRIMARY, {"id": event_id, **timed("Demo", MONDAY_9)})

    assert client.delete(PRIMARY, event_id) is True
    assert client.delete(PRIMARY, event_id) is False
    assert google.events(PRIMARY) == []
    gone = client.get(PRIMARY, event_id)
    assert gone is not None and gone["status"] == "cancelled"
    assert client.get(PRIMARY, event_id_for("bk_never0inserted0abcd")) is None
    assert client.delete(PRIMARY, event_id_for("bk_never0inserted0abcd")) is False


# -- throttling and outages ------------------------------------------------------------------------------


def test_a_403_rate_limit_is_rate_limited(google: GoogleFake, client: GoogleCalendarClient) -> None:
    google.fail_next(403, reason="rateLimitExceeded", path_contains="/events")

    with pytest.raises(Throttled) as caught:
        client.events_page(PRIMARY, sync_token=None, page_token=None)

    assert caught.value.status == 403
    assert caught.value.reason == "rateLimitExceeded"
    assert caught.value.retry_after is None
    assert client.events_page(PRIMARY, sync_token=None, page_token=None).next_sync_token
    assert client.calls == 2 and google.count("/events") == 2


def test_a_429_carries_retry_after_in_either_form(google: GoogleFake, client: GoogleCalendarClient) -> None:
    google.fail_next(429, retry_after=7)
    with pytest.raises(Throttled) as caught:
        client.calendars()
    assert caught.value.status == 429 and caught.value.retry_after == 7.0

    google.fail_next(429, retry_after=email.utils.formatdate(time.time() + 30, usegmt=True))
    with pytest.raises(Throttled) as caught:
        client.calendars()
    assert caught.value.retry_after is not None and 25 <= caught.value.retry_after <= 30


def test_a_user_rate_limit_and_a_quota_are_rate_limited_too(
    google: GoogleFake, client: GoogleCalendarClient
) -> None:
    for reason in ("userRateLimitExceeded", "quotaExceeded"):
        google.fail_next(403, reason=reason)
        with pytest.raises(Throttled):
            client.calendars()


def test_a_5xx_is_unavailable_with_its_retry_after(google: GoogleFake, client: GoogleCalendarClient) -> None:
    google.fail_next(503, retry_after=2)
    with pytest.raises(Unavailable) as caught:
        client.calendars()
    assert caught.value.status == 503 and caught.value.retry_after == 2.0


# -- push ------------------------------------------------------------------------------------------------


def test_watch_sends_the_sync_handshake_then_exists_on_changes(
    google: GoogleFake, client: GoogleCalendarClient, push_receiver: PushReceiver
) -> None:
    channel = client.watch(
        PRIMARY,
        channel_id="agentcal-chan-1",
        address=push_receiver.hook_url,
        token="verify-me",
        ttl_seconds=3600,
    )

    assert channel.id == "agentcal-chan-1" and channel.resource_id
    assert timedelta(minutes=59) < channel.expiration - datetime.now(UTC) <= timedelta(hours=1)
    handshake = push_receiver.wait_for(1)[0]
    assert handshake.headers["x-goog-channel-id"] == "agentcal-chan-1"
    assert handshake.headers["x-goog-channel-token"] == "verify-me"
    assert handshake.headers["x-goog-resource-id"] == channel.resource_id
    assert handshake.headers["x-goog-resource-state"] == "sync"
    assert handshake.headers["x-goog-message-number"] == "1"
    assert handshake.headers["x-goog-resource-uri"].startswith(google.api_url)
    assert email.utils.parsedate_to_datetime(handshake.headers["x-goog-channel-expiration"])

    google.human_put(PRIMARY, timed("Dentist", MONDAY_9))

    change = push_receiver.wait_for(2)[1]
    assert change.headers["x-goog-resource-state"] == "exists"
    assert change.headers["x-goog-message-number"] == "2"
    assert change.body == b""  # notifications carry no event data
    google.notify(PRIMARY)
    assert push_receiver.wait_for(3)[2].headers["x-goog-message-number"] == "3"
    google.settle()
    assert all(delivery.delivered for delivery in google.deliveries)


def test_after_stop_changes_notify_nothing(
    google: GoogleFake, client: GoogleCalendarClient, push_receiver: PushReceiver
) -> None:
    channel = client.watch(
        PRIMARY, channel_id="agentcal-chan-2", address=push_receiver.hook_url, token="t", ttl_seconds=600
    )
    push_receiver.wait_for(1)

    client.stop(channel_id=channel.id, resource_id=channel.resource_id)
    google.human_put(PRIMARY, timed("Dentist", MONDAY_9))
    google.settle()

    assert len(push_receiver.received) == 1
    assert google.channels(PRIMARY) == []
    client.stop(channel_id=channel.id, resource_id=channel.resource_id)  # stopped already: no error


# -- event ids -------------------------------------------------------------------------------------------


def test_event_ids_for_bookings_are_valid_deterministic_and_distinct() -> None:
    samples = booking_ids(200) + ["bk_00000000000000000000", "bk_zzzzzzzzzzzzzzzzzzzz"]

    event_ids = [event_id_for(booking_id) for booking_id in samples]

    assert all(re.fullmatch(r"[a-v0-9]{5,1024}", event_id) for event_id in event_ids)
    assert event_ids == [event_id_for(booking_id) for booking_id in samples]
    assert len(set(event_ids)) == len(set(samples))
    assert [booking_id_from(event_id) for event_id in event_ids] == samples
    assert booking_id_from("someone0elses0event0id") is None
