"""A moved booking's upstream copy is rewritten in place — the same href and UID on CalDAV (Radicale), the
same event id on Google and Microsoft (their fakes) — never deleted and written again, also when the
write-behind runs twice or concurrently; a bumped booking moved back leaves exactly one copy."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection as db

from sync.models import UpstreamCopy
from sync.writeback import write_behind
from tests.helpers import Persona
from tests.sync.linking import hour, link, span
from tests.sync.oauth_linking import GOOGLE_CALENDAR, OUTLOOK_CALENDAR
from tests.sync.radicale import CalDAVAccount, FaultyProxy, Human


@dataclass(frozen=True)
class Copy:
    """One copy as the provider holds it: what names it there, its span, and its revision if kept."""

    names: tuple[str, ...]
    start: datetime
    end: datetime
    sequence: int | None


@dataclass
class Upstream:
    calendar_id: str
    pk: int
    copies: Callable[[], list[Copy]]
    deletes: Callable[[], int]  # delete requests for events the provider received
    # Whether a copy removed upstream can come back under its old name: Graph never re-creates an id.
    names_come_back: bool = True


def _ical_time(data: str, name: str) -> datetime:
    match = re.search(rf"^{name}:(\d{{8}}T\d{{6}}Z)\r?$", data, re.MULTILINE)
    assert match, data
    return datetime.strptime(match[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def _caldav_copies(human: Human) -> list[Copy]:
    copies = []
    for href, data in human.list().items():
        uid = re.search(r"^UID:(.+?)\r?$", data, re.MULTILINE)
        sequence = re.search(r"^SEQUENCE:(\d+)\r?$", data, re.MULTILINE)
        assert uid and sequence, data
        copies.append(
            Copy((href, uid[1]), _ical_time(data, "DTSTART"), _ical_time(data, "DTEND"), int(sequence[1]))
        )
    return copies


def _caldav(request: pytest.FixtureRequest) -> Upstream:
    account: CalDAVAccount = request.getfixturevalue("caldav_calendar")
    proxy: FaultyProxy = request.getfixturevalue("faulty_proxy")
    human: Human = request.getfixturevalue("human")
    request.getfixturevalue("sync_settings")
    # Through the proxy, which counts every request by method.
    through = CalDAVAccount(proxy.through(account.url), account.username, account.password)
    linked = link(request.getfixturevalue("sdr"), through, human)
    return Upstream(
        linked.calendar_id, linked.pk, lambda: _caldav_copies(human), lambda: proxy.count("DELETE")
    )


def _google(request: pytest.FixtureRequest) -> Upstream:
    linked = request.getfixturevalue("glinked")

    def copies() -> list[Copy]:
        return [
            Copy(
                (e["id"], e.get("iCalUID", "")),
                datetime.fromisoformat(e["start"]["dateTime"]),
                datetime.fromisoformat(e["end"]["dateTime"]),
                int(e.get("sequence", 0)),
            )
            for e in linked.fake.events(GOOGLE_CALENDAR)
        ]

    return Upstream(
        linked.calendar_id, linked.pk, copies, lambda: linked.fake.count("/events/", method="DELETE")
    )


def _microsoft(request: pytest.FixtureRequest) -> Upstream:
    linked = request.getfixturevalue("mslinked")

    def at(moment: dict[str, str]) -> datetime:
        assert moment["timeZone"] == "UTC"
        return datetime.fromisoformat(moment["dateTime"]).replace(tzinfo=UTC)

    def copies() -> list[Copy]:
        return [
            Copy((e["id"], e["transactionId"]), at(e["start"]), at(e["end"]), None)
            for e in linked.fake.events(OUTLOOK_CALENDAR)
        ]

    return Upstream(
        linked.calendar_id,
        linked.pk,
        copies,
        lambda: linked.fake.count("/events/", method="DELETE"),
        names_come_back=False,
    )


@pytest.fixture(params=["caldav", "google", "microsoft"])
def upstream(request: pytest.FixtureRequest) -> Upstream:
    return {"caldav": _caldav, "google": _google, "microsoft": _microsoft}[request.param](request)


def _commit(persona: Persona, upstream: Upstream, start: datetime, **fields: Any) -> str:
    response = persona.client.post(
        f"/calendars/{upstream.calendar_id}/commits", json={**span(start), "title": "Intro call", **fields}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _move(persona: Persona, booking_id: str, start: datetime) -> None:
    response = persona.client.post(f"/bookings/{booking_id}/move", json=span(start, minutes=60))
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "committed"


def _concurrently(pk: int, runs: int = 4) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            write_behind(pk)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            db.close()  # this thread's own connection

    threads = [threading.Thread(target=run) for _ in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_a_moved_booking_is_rewritten_in_place_even_by_repeated_and_concurrent_runs(
    upstream: Upstream, sdr: Persona
) -> None:
    booking_id = _commit(sdr, upstream, hour(30))
    write_behind(upstream.pk)
    [before] = upstream.copies()
    assert before.start == hour(30)

    _move(sdr, booking_id, hour(34))
    _concurrently(upstream.pk)
    write_behind(upstream.pk)
    write_behind(upstream.pk)  # as a retried task would

    [after] = upstream.copies()
    assert after.names == before.names, "the same upstream copy, not a new one"
    assert (after.start, after.end) == (hour(34), hour(35))
    if before.sequence is not None:
        assert after.sequence == before.sequence + 1
    assert upstream.deletes() == 0
    [copy] = UpstreamCopy.objects.filter(connection_id=upstream.pk)
    assert (copy.booking_id, copy.sequence) == (booking_id, 1)


def test_a_bumped_booking_moved_back_before_the_write_behind_ran_is_rewritten_in_place(
    upstream: Upstream, sdr: Persona, exec_assistant: Persona
) -> None:
    victim = _commit(sdr, upstream, hour(30), priority=100)
    write_behind(upstream.pk)
    [before] = upstream.copies()

    bumper = _commit(exec_assistant, upstream, hour(30), priority=900, title="Board call")
    assert sdr.client.get(f"/bookings/{victim}").json()["status"] == "bumped"
    _move(sdr, victim, hour(34))
    _concurrently(upstream.pk)
    write_behind(upstream.pk)

    copies = {copy.start: copy for copy in upstream.copies()}
    assert sorted(copies) == [hour(30), hour(34)], "the bumper's copy and the victim's, once each"
    assert copies[hour(34)].names == before.names
    assert upstream.deletes() == 0
    assert {c.booking_id for c in UpstreamCopy.objects.filter(connection_id=upstream.pk)} == {victim, bumper}


def test_a_bumped_booking_whose_copy_was_removed_comes_back_as_exactly_one_copy(
    upstream: Upstream, sdr: Persona, exec_assistant: Persona
) -> None:
    victim = _commit(sdr, upstream, hour(30), priority=100)
    write_behind(upstream.pk)
    [before] = upstream.copies()
    _commit(exec_assistant, upstream, hour(30), priority=900, title="Board call")
    write_behind(upstream.pk)  # the bumped booking leaves the person's calendar
    assert [copy.start for copy in upstream.copies()] == [hour(30)]
    assert before not in upstream.copies()

    _move(sdr, victim, hour(34))
    _concurrently(upstream.pk)
    write_behind(upstream.pk)

    back = [copy for copy in upstream.copies() if copy.start != hour(30)]
    assert [(copy.start, copy.end) for copy in back] == [(hour(34), hour(35))]
    assert (back[0].names == before.names) is upstream.names_come_back
    assert UpstreamCopy.objects.filter(connection_id=upstream.pk, booking_id=victim).count() == 1
