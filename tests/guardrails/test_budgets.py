"""Budgets the engine keeps exactly, in the write's own transaction: live holds at once and bookings per
UTC day, refused with 429 quota_exceeded, checked with real concurrent clients and SQL afterwards."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from django.db import connection

from tests.guardrails.helpers import set_limits
from tests.helpers import Persona, create_calendar, slot


def _live_holds(persona: Persona) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT hold_id) FROM bookings_reservation"
            " WHERE agent_id = %s AND status = 'held' AND expires_at > now()",
            [persona.agent.pk],
        )
        return int(cursor.fetchone()[0])


def _bookings(persona: Persona) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT booking_id) FROM bookings_reservation"
            " WHERE agent_id = %s AND status = 'committed'",
            [persona.agent.pk],
        )
        return int(cursor.fetchone()[0])


def _race(
    persona: Persona, live_server: Any, requests: list[tuple[str, dict[str, Any]]]
) -> list[httpx.Response]:
    def send(request: tuple[str, dict[str, Any]]) -> httpx.Response:
        path, body = request
        with httpx.Client(
            base_url=f"{live_server.url}/v1",
            headers={"Authorization": f"Bearer {persona.raw_key}"},
            timeout=30,
        ) as client:
            return client.post(path, json=body)

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(send, requests))


def test_concurrent_holds_stop_exactly_at_the_live_holds_budget(sdr: Persona, live_server: Any) -> None:
    set_limits(sdr, live_holds=5)
    calendars = [create_calendar(sdr, name=f"room {i}")["id"] for i in range(4)]
    # One-calendar holds (the one-statement write) and multi-calendar holds (the general path) at once.
    requests: list[tuple[str, dict[str, Any]]] = [
        (f"/calendars/{calendars[i % 4]}/holds", dict(slot(hours_ahead=30 + i))) for i in range(14)
    ]
    requests += [
        (f"/calendars/{calendars[0]}/holds", {**slot(hours_ahead=60 + i), "also_calendars": [calendars[1]]})
        for i in range(6)
    ]
    answers = _race(sdr, live_server, requests)
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {201: 5, 429: 15}, statuses
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.json()["error"] == "quota_exceeded" and refused.json()["quota"] == "live_holds"
    assert refused.json()["limit"] == 5
    assert 1 <= int(refused.headers["Retry-After"]) <= 30, "when the first live hold lapses"
    assert _live_holds(sdr) == 5

    # Releasing one makes room for exactly one more.
    held = next(a.json() for a in answers if a.status_code == 201)
    released = sdr.client.request("DELETE", f"/holds/{held['id']}", json={"hold_token": held["hold_token"]})
    assert released.status_code in (200, 204), released.text
    more = [
        sdr.client.post(f"/calendars/{calendars[2]}/holds", json=slot(hours_ahead=90 + i)) for i in range(2)
    ]
    assert [m.status_code for m in more] == [201, 429]
    assert _live_holds(sdr) == 5


def test_concurrent_bookings_stop_exactly_at_the_daily_budget(sdr: Persona, live_server: Any) -> None:
    set_limits(sdr, bookings_per_day=4)
    calendars = [create_calendar(sdr, name=f"room {i}")["id"] for i in range(3)]
    requests = [(f"/calendars/{calendars[i % 3]}/commits", slot(hours_ahead=30 + i)) for i in range(12)]
    answers = _race(sdr, live_server, requests)
    assert Counter(a.status_code for a in answers) == {201: 4, 429: 8}
    refused = next(a for a in answers if a.status_code == 429).json()
    assert (refused["quota"], refused["limit"], refused["window_seconds"]) == ("bookings_per_day", 4, 86400)
    assert _bookings(sdr) == 4

    # A hold may still be made (it is not a booking); its commit is refused and leaves the hold live.
    hold = sdr.client.post(f"/calendars/{calendars[0]}/holds", json=slot(hours_ahead=80)).json()
    commit = sdr.client.post(f"/calendars/{calendars[0]}/commits", json={"hold_token": hold["hold_token"]})
    assert commit.status_code == 429 and commit.json()["quota"] == "bookings_per_day"
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "held"
    assert _bookings(sdr) == 4


def test_budgets_are_per_agent(make_agent: Any) -> None:
    first, second = make_agent("first"), make_agent("second")
    set_limits(first, live_holds=1)
    calendar = create_calendar(first)["id"]
    assert first.client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=30)).status_code == 201
    assert first.client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=31)).status_code == 429
    assert second.client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=31)).status_code == 201
