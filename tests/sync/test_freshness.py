"""Decisions on fresh upstream data: `max_upstream_staleness_seconds` makes the server sync a stale link
(a real Radicale, reached through a counting proxy) before it decides; concurrent requests share one
sync; an upstream that cannot be reached answers 503 upstream_stale."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now

from sync.models import Connection
from tests.bookings.helpers import problem
from tests.helpers import Persona
from tests.sync.linking import Linked, hour, link, phone_event, span, synced
from tests.sync.radicale import CalDAVAccount, FaultyProxy, Human


@pytest.fixture
def proxied(
    sdr: Persona, caldav_calendar: CalDAVAccount, human: Human, faulty_proxy: FaultyProxy, sync_settings: Any
) -> Linked:
    """The SDR's calendar linked to the human's Radicale calendar through the proxy, synced once."""
    account = CalDAVAccount(
        faulty_proxy.through(caldav_calendar.url), caldav_calendar.username, caldav_calendar.password
    )
    linked = link(sdr, account, human)
    synced(linked)
    return linked


def make_stale(linked: Linked, minutes: int = 10) -> None:
    Connection.objects.filter(pk=linked.pk).update(last_synced_at=Now() - timedelta(minutes=minutes))


def test_a_hold_on_a_stale_link_syncs_first_and_meets_the_event_added_a_moment_ago(
    proxied: Linked, sdr: Persona
):
    start = hour(30)
    proxied.human.put("dentist.ics", phone_event("dentist-1", start, 60))  # on the phone, not synced yet
    make_stale(proxied)

    refused = sdr.client.post(
        f"/calendars/{proxied.calendar_id}/holds", json={**span(start), "max_upstream_staleness_seconds": 5}
    )

    body = problem(refused, 409, "slot_conflict")
    assert body["conflicting"]["source"] == "caldav"
    assert Connection.objects.get(pk=proxied.pk).last_synced_at is not None
    # Fresh enough now: the next request decides at once.
    fresh = sdr.client.post(
        f"/calendars/{proxied.calendar_id}/holds",
        json={**span(start + timedelta(hours=2)), "max_upstream_staleness_seconds": 60},
    )
    assert fresh.status_code == 201, fresh.text


def test_without_the_parameter_the_last_sync_decides(proxied: Linked, sdr: Persona):
    start = hour(30)
    proxied.human.put("dentist.ics", phone_event("dentist-1", start, 60))
    make_stale(proxied)

    assert sdr.client.post(f"/calendars/{proxied.calendar_id}/holds", json=span(start)).status_code == 201


def test_an_unreachable_upstream_answers_503_upstream_stale(
    proxied: Linked, sdr: Persona, faulty_proxy: FaultyProxy
):
    make_stale(proxied)
    faulty_proxy.fail_next(503, times=20)

    response = sdr.client.post(
        f"/calendars/{proxied.calendar_id}/holds",
        json={**span(hour(30)), "max_upstream_staleness_seconds": 5},
    )

    body = problem(response, 503, "upstream_stale")
    assert body["retryable"] is True and int(response.headers["Retry-After"]) > 0
    assert [c["calendar"] for c in body["calendars"]] == [proxied.calendar_id]
    assert body["calendars"][0]["last_synced_at"]
    search = sdr.client.post(
        "/availability/search",
        json={
            "calendars": [proxied.calendar_id],
            "duration_minutes": 30,
            "start": span(hour(30))["start_time"],
            "end": span(hour(32))["start_time"],
            "max_upstream_staleness_seconds": 5,
        },
    )
    problem(search, 503, "upstream_stale")


def test_a_move_by_search_honours_the_staleness_given_inside_its_search(
    proxied: Linked, sdr: Persona, faulty_proxy: FaultyProxy
):
    booking = sdr.client.post(f"/calendars/{proxied.calendar_id}/commits", json=span(hour(30)))
    assert booking.status_code == 201, booking.text
    make_stale(proxied)
    faulty_proxy.fail_next(503, times=20)

    moved = sdr.client.post(
        f"/bookings/{booking.json()['id']}/move",
        json={
            "search": {
                "calendars": [proxied.calendar_id],
                "duration_minutes": 30,
                "start": span(hour(34))["start_time"],
                "end": span(hour(36))["start_time"],
                "max_upstream_staleness_seconds": 5,
            }
        },
    )

    problem(moved, 503, "upstream_stale")
    after = sdr.client.get(f"/bookings/{booking.json()['id']}").json()
    assert (after["start_time"], after["fencing_token"]) == (
        booking.json()["start_time"],
        booking.json()["fencing_token"],
    )


@pytest.mark.concurrency
def test_twenty_concurrent_stale_requests_cause_one_upstream_sync(
    proxied: Linked, sdr: Persona, faulty_proxy: FaultyProxy
):
    def hold(n: int) -> Any:
        with sdr.new_client() as client:
            return client.post(
                f"/calendars/{proxied.calendar_id}/holds",
                json={**span(hour(40 + n)), "max_upstream_staleness_seconds": 30},
            )

    # What one sync of this link asks Radicale: one stale request alone.
    make_stale(proxied)
    before = faulty_proxy.count("REPORT")
    assert hold(0).status_code == 201
    one_sync = faulty_proxy.count("REPORT") - before
    assert one_sync >= 1

    make_stale(proxied)
    before = faulty_proxy.count("REPORT")
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(hold, range(1, 21)))

    assert [a.status_code for a in answers] == [201] * 20, [a.text for a in answers if a.status_code != 201]
    assert faulty_proxy.count("REPORT") - before == one_sync
