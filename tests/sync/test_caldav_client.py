"""The CalDAV client against a real Radicale: the check, incremental sync with a person editing the same
calendar, the ctag/etag fallback, conditional writes, and how failures come out (through a proxy that
answers in Radicale's place when told to)."""

from __future__ import annotations

import email.utils
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sync.providers import caldav_client as caldav
from sync.providers.caldav_client import CalDAVClient
from sync.providers.errors import (
    AuthFailed,
    NotACalendar,
    PreconditionFailed,
    SyncTokenRefused,
    Unavailable,
    UpstreamError,
)
from tests.sync.radicale import (
    DEFAULT_PASSWORD,
    DEFAULT_USER,
    CalDAVAccount,
    FaultyProxy,
    Human,
    RadicaleServer,
    ics_event,
)

MONDAY_9 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


def client_for(account: CalDAVAccount, url: str | None = None) -> CalDAVClient:
    return CalDAVClient(url or account.url, account.username, account.password, timeout=5)


def href(account: CalDAVAccount, name: str) -> str:
    return urlsplit(account.url).path + name


def test_it_checks_a_calendar_that_supports_sync(caldav_calendar: CalDAVAccount) -> None:
    with client_for(caldav_calendar) as client:
        info = client.check()

    assert info.supports_sync is True
    assert info.ctag
    assert info.sync_token


def test_a_wrong_password_is_auth_failed_and_the_message_does_not_show_it(
    caldav_calendar: CalDAVAccount,
) -> None:
    password = "not-the-S3cret-at-all"
    with (
        CalDAVClient(caldav_calendar.url, DEFAULT_USER, password) as client,
        pytest.raises(AuthFailed) as caught,
    ):
        client.check()

    assert caught.value.status == 401
    assert password not in str(caught.value)
    assert password not in repr(caught.value)


def test_another_users_calendar_is_auth_failed(
    radicale: RadicaleServer, caldav_calendar: CalDAVAccount
) -> None:
    radicale.new_calendar("bob", "bob-password")  # bob exists and signs in: Radicale re-read its users

    with (
        CalDAVClient(caldav_calendar.url, "bob", "bob-password") as client,
        pytest.raises(AuthFailed) as caught,
    ):
        client.check()

    assert caught.value.status == 403


@pytest.mark.parametrize("path", ["/alice/", "/alice/no-such-calendar/"], ids=["principal", "missing"])
def test_a_url_that_is_not_a_calendar_is_refused(radicale: RadicaleServer, path: str) -> None:
    radicale.new_calendar()  # alice's principal collection exists from now on
    with (
        CalDAVClient(radicale.url + path, DEFAULT_USER, DEFAULT_PASSWORD) as client,
        pytest.raises(NotACalendar),
    ):
        client.check()


def test_initial_sync_returns_every_event_with_etag_data_and_token(
    caldav_calendar: CalDAVAccount, human: Human
) -> None:
    human.put("dentist.ics", ics_event("dentist"))
    human.put("team sync+1.ics", ics_event("team", summary="Team sync"))  # a name that needs quoting

    with client_for(caldav_calendar) as client:
        delta = client.sync(None)
        etags = client.etags()

    by_href = {resource.href: resource for resource in delta.changed}
    assert set(by_href) == {href(caldav_calendar, "dentist.ics"), href(caldav_calendar, "team sync+1.ics")}
    assert {h: resource.etag for h, resource in by_href.items()} == etags
    assert "UID:team" in by_href[href(caldav_calendar, "team sync+1.ics")].data
    assert delta.deleted == []
    assert delta.sync_token


def test_sync_with_the_token_returns_exactly_what_the_human_changed(
    caldav_calendar: CalDAVAccount, human: Human
) -> None:
    for uid in ("kept", "moved", "cancelled"):
        human.put(f"{uid}.ics", ics_event(uid))
    with client_for(caldav_calendar) as client:
        token = client.sync(None).sync_token

        human.put("added.ics", ics_event("added"))
        human.put("moved.ics", ics_event("moved", start=MONDAY_9 + timedelta(hours=3)))
        human.delete("cancelled.ics")
        delta = client.sync(token)
        after = client.sync(delta.sync_token)

    assert {resource.href for resource in delta.changed} == {
        href(caldav_calendar, "added.ics"),
        href(caldav_calendar, "moved.ics"),
    }
    moved = next(r for r in delta.changed if r.href.endswith("moved.ics"))
    assert "DTSTART:20300107T120000Z" in moved.data
    assert delta.deleted == [href(caldav_calendar, "cancelled.ics")]
    assert delta.sync_token != token
    assert (after.changed, after.deleted, after.sync_token) == ([], [], delta.sync_token)


@pytest.mark.parametrize(
    "token",
    ["garbage", "http://radicale.org/ns/sync/" + "0" * 64],
    ids=["malformed", "unknown"],
)
def test_a_refused_token_raises_stale_and_never_lists_everything(
    caldav_calendar: CalDAVAccount, human: Human, faulty_proxy: FaultyProxy, token: str
) -> None:
    human.put("dentist.ics", ics_event("dentist"))

    proxied = client_for(caldav_calendar, faulty_proxy.through(caldav_calendar.url))
    with proxied as client, pytest.raises(SyncTokenRefused) as caught:
        client.sync(token)

    assert caught.value.status == 403  # Radicale's way, with DAV:valid-sync-token in the body
    assert faulty_proxy.count("REPORT") == 1  # no second, token-less REPORT behind the caller's back


def test_the_etag_fallback_sees_the_same_calendar_as_sync(
    caldav_calendar: CalDAVAccount, human: Human
) -> None:
    for uid in ("one", "two", "three"):
        human.put(f"{uid}.ics", ics_event(uid, summary=uid))

    with client_for(caldav_calendar) as client:
        ctag_before = client.ctag()
        synced = client.sync(None).changed
        fetched = client.fetch(sorted(client.etags()))
        human.put("two.ics", ics_event("two", summary="two, moved", start=MONDAY_9 + timedelta(days=1)))
        ctag_after = client.ctag()

    assert sorted(fetched, key=lambda r: r.href) == sorted(synced, key=lambda r: r.href)
    assert ctag_before is not None
    assert ctag_after != ctag_before


def test_fetch_asks_in_chunks_and_leaves_out_what_is_gone(
    caldav_calendar: CalDAVAccount, human: Human, faulty_proxy: FaultyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(caldav, "MULTIGET_CHUNK", 2)
    for uid in ("a", "b", "c"):
        human.put(f"{uid}.ics", ics_event(uid))
    wanted = [href(caldav_calendar, f"{name}.ics") for name in ("a", "b", "gone", "c")]

    with client_for(caldav_calendar, faulty_proxy.through(caldav_calendar.url)) as client:
        fetched = client.fetch(wanted)

    assert sorted(resource.href for resource in fetched) == [wanted[0], wanted[1], wanted[3]]
    assert faulty_proxy.count("REPORT") == 2


def test_a_truncated_sync_answer_is_followed_to_the_end(
    caldav_calendar: CalDAVAccount, human: Human, faulty_proxy: FaultyProxy
) -> None:
    with client_for(caldav_calendar) as client:
        token = client.sync(None).sync_token
    human.put("first.ics", ics_event("first"))
    human.put("second.ics", ics_event("second"))
    first = href(caldav_calendar, "first.ics")
    collection = urlsplit(caldav_calendar.url).path
    # A server that sends one change, then "more" (RFC 6578 §3.6) with a token to go on from. Going on
    # from the old token re-sends `first` as well: the client must merge, not duplicate.
    page = (
        f'<?xml version="1.0"?><multistatus xmlns="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">'
        f'<response><href>{first}</href><propstat><prop><getetag>"page"</getetag>'
        f"<C:calendar-data>{ics_event('first')}</C:calendar-data></prop>"
        f"<status>HTTP/1.1 200 OK</status></propstat></response>"
        f"<response><href>{collection}</href><status>HTTP/1.1 507 Insufficient Storage</status></response>"
        f"<sync-token>{token}</sync-token></multistatus>"
    )
    faulty_proxy.fail_next(207, body=page.encode(), headers={"Content-Type": "text/xml"}, methods={"REPORT"})

    with client_for(caldav_calendar, faulty_proxy.through(caldav_calendar.url)) as client:
        delta = client.sync("http://radicale.org/ns/sync/" + "1" * 64)  # answered by the page above

    assert sorted(resource.href for resource in delta.changed) == [first, href(caldav_calendar, "second.ics")]
    assert next(r for r in delta.changed if r.href == first).etag != '"page"'  # the later round wins
    assert faulty_proxy.count("REPORT") == 2


def test_create_only_twice_fails_the_second_time_and_keeps_one_event(
    caldav_calendar: CalDAVAccount, human: Human
) -> None:
    with client_for(caldav_calendar) as client:
        etag = client.put("bk_abc.ics", ics_event("bk_abc", summary="Held by AgentCal"), create_only=True)
        with pytest.raises(PreconditionFailed) as caught:
            client.put("bk_abc.ics", ics_event("bk_abc", summary="Second try"), create_only=True)

    assert etag
    assert caught.value.status == 412
    events = human.list()
    assert list(events) == ["bk_abc.ics"]
    assert "SUMMARY:Held by AgentCal" in events["bk_abc.ics"]


def test_a_put_with_a_stale_etag_does_not_overwrite_the_humans_edit(
    caldav_calendar: CalDAVAccount, human: Human
) -> None:
    with client_for(caldav_calendar) as client:
        etag = client.put("bk_abc.ics", ics_event("bk_abc"), create_only=True)
        human.put(
            "bk_abc.ics", ics_event("bk_abc", summary="Moved by hand", start=MONDAY_9 + timedelta(hours=1))
        )
        with pytest.raises(PreconditionFailed):
            client.put("bk_abc.ics", ics_event("bk_abc", summary="AgentCal's version"), if_match=etag)
        assert "SUMMARY:Moved by hand" in (human.get("bk_abc.ics") or "")
        current = client.etags()[href(caldav_calendar, "bk_abc.ics")]
        new_etag = client.put("bk_abc.ics", ics_event("bk_abc", summary="Agreed"), if_match=current)

    assert new_etag and new_etag != current
    assert "SUMMARY:Agreed" in (human.get("bk_abc.ics") or "")


def test_delete_says_whether_it_deleted(caldav_calendar: CalDAVAccount, human: Human) -> None:
    human.put("lunch with Bob+Ann.ics", ics_event("lunch"))  # the name must be quoted the same both ways

    with client_for(caldav_calendar) as client:
        assert client.delete("lunch with Bob+Ann.ics") is True
        assert client.delete("lunch with Bob+Ann.ics") is False

    assert human.list() == {}


def test_a_503_with_retry_after_seconds_is_unavailable_for_that_long(
    caldav_calendar: CalDAVAccount, faulty_proxy: FaultyProxy
) -> None:
    faulty_proxy.fail_next(503, retry_after="7")

    with client_for(caldav_calendar, faulty_proxy.through(caldav_calendar.url)) as client:
        with pytest.raises(Unavailable) as caught:
            client.check()
        assert client.check().supports_sync  # only the one answer was injected

    assert (caught.value.status, caught.value.retry_after) == (503, 7.0)


def test_a_429_with_an_http_date_retry_after_parses_to_seconds_from_now(
    caldav_calendar: CalDAVAccount, faulty_proxy: FaultyProxy
) -> None:
    later = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    faulty_proxy.fail_next(429, retry_after=later, methods={"PUT"})
    faulty_proxy.fail_next(500, methods={"PUT"})

    with client_for(caldav_calendar, faulty_proxy.through(caldav_calendar.url)) as client:
        with pytest.raises(Unavailable) as throttled:
            client.put("bk_abc.ics", ics_event("bk_abc"))
        with pytest.raises(Unavailable) as failed:
            client.put("bk_abc.ics", ics_event("bk_abc"))

    assert throttled.value.status == 429
    assert throttled.value.retry_after is not None
    assert 110 <= throttled.value.retry_after <= 120
    assert (failed.value.status, failed.value.retry_after) == (500, None)
    assert faulty_proxy.count("PUT") == 2


def test_a_redirect_is_not_followed(caldav_calendar: CalDAVAccount, faulty_proxy: FaultyProxy) -> None:
    faulty_proxy.fail_next(301, headers={"Location": "https://elsewhere.example/cal/"})

    proxied = client_for(caldav_calendar, faulty_proxy.through(caldav_calendar.url))
    with proxied as client, pytest.raises(UpstreamError, match="elsewhere.example") as caught:
        client.check()

    assert caught.value.status == 301
    assert faulty_proxy.count("PROPFIND") == 1


def test_an_answer_declaring_entities_is_refused(
    caldav_calendar: CalDAVAccount, faulty_proxy: FaultyProxy
) -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE m [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        b'<multistatus xmlns="DAV:"><response><href>&b;</href></response></multistatus>'
    )
    faulty_proxy.fail_next(207, body=bomb, headers={"Content-Type": "text/xml"})

    proxied = client_for(caldav_calendar, faulty_proxy.through(caldav_calendar.url))
    with proxied as client, pytest.raises(UpstreamError, match="DOCTYPE"):
        client.check()


def test_an_answer_over_the_size_cap_is_refused(
    caldav_calendar: CalDAVAccount, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(caldav, "MAX_RESPONSE_BYTES", 200)  # Radicale's PROPFIND answer is over 1 kB

    with client_for(caldav_calendar) as client, pytest.raises(UpstreamError, match="response over 200 bytes"):
        client.check()


def test_a_stopped_server_is_unavailable(tmp_path: Path) -> None:
    server = RadicaleServer(tmp_path)
    server.start()
    try:
        url = server.new_calendar()
        with CalDAVClient(url, DEFAULT_USER, DEFAULT_PASSWORD, timeout=2) as client:
            assert client.check().supports_sync
            server.stop()
            with pytest.raises(Unavailable) as caught:
                client.check()
    finally:
        server.stop()

    assert (caught.value.status, caught.value.retry_after) == (None, None)


class _TricklingHandler(BaseHTTPRequestHandler):
    """A server that answers at once, then sends its body one byte at a time, each well within the read
    timeout: for about 10 s, then it hangs up."""

    def do_PROPFIND(self) -> None:  # noqa: N802 — the method name http.server dispatches to
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(207)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        for _ in range(50):
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return  # the client gave up
            time.sleep(0.2)

    def log_message(self, *args: object) -> None:
        pass


def test_a_trickled_answer_is_unavailable_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caldav, "MAX_EXCHANGE_SECONDS", 1.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TricklingHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/dav/cal/"
    started = time.monotonic()
    try:
        client = CalDAVClient(url, DEFAULT_USER, DEFAULT_PASSWORD, timeout=5)
        with client, pytest.raises(Unavailable, match="not complete after 1 s"):
            client.check()
    finally:
        server.shutdown()
        server.server_close()

    assert time.monotonic() - started < 3  # the deadline, not the server, ended it
