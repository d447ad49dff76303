"""Each endpoint needs one scope: without it `403 insufficient_scope` naming it; with only it, allowed."""

from __future__ import annotations

import pytest

from bookings.models import Reservation
from tests.helpers import ALL_SCOPES, audit_rows, create_calendar, slot

# (method, path template, body, required scope). {cal}, {hold}, {booking} are filled from real objects.
ENDPOINTS = [
    ("GET", "/calendars", None, "calendars:read"),
    ("POST", "/calendars", {"name": "Scoped"}, "calendars:write"),
    ("GET", "/calendars/{cal}", None, "calendars:read"),
    ("PATCH", "/calendars/{cal}", {"name": "Renamed"}, "calendars:write"),
    ("GET", "/calendars/{cal}/availability?start={start}&end={end}", None, "bookings:read"),
    ("POST", "/calendars/{cal}/holds", "span", "bookings:write"),
    ("POST", "/calendars/{cal}/commits", "span", "bookings:write"),
    ("GET", "/calendars/{cal}/bookings", None, "bookings:read"),
    ("GET", "/holds/{hold}", None, "bookings:read"),
    ("DELETE", "/holds/{hold}", {"hold_token": "whatever"}, "bookings:write"),
    ("POST", "/holds/{hold}/extend", {"hold_token": "whatever"}, "bookings:write"),
    ("GET", "/bookings/{booking}", None, "bookings:read"),
    ("DELETE", "/bookings/{booking}", None, "bookings:write"),
    ("GET", "/audit", None, "audit:read"),
]


@pytest.fixture
def objects(sdr):
    """A calendar with a hold and a booking made by the SDR, to address real resources."""
    cal = create_calendar(sdr)
    hold = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=30))
    booking = sdr.client.post(f"/calendars/{cal['id']}/commits", json=slot(hours_ahead=32))
    assert hold.status_code == booking.status_code == 201, (hold.text, booking.text)
    window = slot(hours_ahead=28, minutes=600)
    return {
        "cal": cal["id"],
        "hold": hold.json()["id"],
        "booking": booking.json()["id"],
        "start": window["start_time"],
        "end": window["end_time"],
    }


def call(persona, method: str, path: str, body, objects, span_hours: int):
    url = path.format(**objects)
    if body == "span":
        body = slot(hours_ahead=span_hours)
    return persona.client.request(method, url, json=body)


def test_a_key_without_the_endpoints_scope_is_403_naming_it(make_agent, objects):
    # One test over every endpoint (not a parametrisation): each live-server test pays a database flush.
    wrong = []
    for number, (method, path, body, scope) in enumerate(ENDPOINTS):
        lacking = make_agent(f"lacking-{number}", scopes=[s for s in ALL_SCOPES if s != scope])
        reservations = Reservation.objects.count()

        response = call(lacking, method, path, body, objects, span_hours=40)

        problem = response.json()
        rows = audit_rows(agent_public_id=lacking.id, outcome="rejected")
        if not (
            response.status_code == 403
            and response.headers["content-type"] == "application/problem+json"
            and problem.get("error") == "insufficient_scope"
            and problem.get("required_scope") == scope
            and scope in problem.get("detail", "")
            and Reservation.objects.count() == reservations
            and [(r.http_status, r.failure_reason) for r in rows] == [(403, "insufficient_scope")]
        ):
            wrong.append((method, path, scope, response.status_code, problem, len(rows)))
    assert wrong == []


def test_a_key_with_only_the_endpoints_scope_gets_past_the_scope_check(make_agent, objects):
    wrong = []
    for number, (method, path, body, scope) in enumerate(ENDPOINTS):
        only = make_agent(f"only-{number}", scopes=[scope])

        response = call(only, method, path, body, objects, span_hours=44 + number)

        # It may still fail for other reasons (not the owner, wrong hold token), never for its scope.
        refused_for_scope = response.status_code == 403 and response.json()["error"] == "insufficient_scope"
        if refused_for_scope or response.status_code >= 500:
            wrong.append((method, path, scope, response.status_code, response.text))
    assert wrong == []


def test_a_key_with_no_scopes_is_refused_everywhere_but_authenticated(make_agent):
    nothing = make_agent("nothing", scopes=[])
    response = nothing.client.get("/calendars")
    assert response.status_code == 403, response.text
    assert response.json()["required_scope"] == "calendars:read"


def test_read_scopes_do_not_grant_writes(make_agent, objects):
    reader = make_agent("reader", scopes=["calendars:read", "bookings:read", "audit:read"])
    assert reader.client.get(f"/calendars/{objects['cal']}").status_code == 200
    assert reader.client.get(f"/holds/{objects['hold']}").status_code == 200
    assert reader.client.get("/audit").status_code == 200
    refused = reader.client.post(f"/calendars/{objects['cal']}/holds", json=slot(hours_ahead=50))
    assert refused.status_code == 403
    assert refused.json()["required_scope"] == "bookings:write"
