"""Another workspace's calendars, holds and bookings do not exist for the caller: always 404, never 403."""

from __future__ import annotations

import pytest

from tests.bookings.helpers import commit, created, hold, problem, rows_of
from tests.helpers import audit_rows, create_calendar, slot


@pytest.fixture
def acme(sdr, calendar):
    """A calendar of acme with one live hold and one booking on it."""
    held = created(hold(sdr, calendar["id"], slot(minutes=30)))
    booking = created(commit(sdr, calendar["id"], slot(minutes=30, offset_minutes=60)))
    return {"calendar": calendar["id"], "hold": held, "booking": booking}


def test_the_outsider_cannot_see_acmes_objects(outsider, acme):
    window = slot(minutes=120)
    reads = [
        outsider.client.get(f"/calendars/{acme['calendar']}"),
        outsider.client.get(
            f"/calendars/{acme['calendar']}/availability",
            params={"start": window["start_time"], "end": window["end_time"]},
        ),
        outsider.client.get(f"/calendars/{acme['calendar']}/bookings"),
        outsider.client.get(f"/holds/{acme['hold']['id']}"),
        outsider.client.get(f"/bookings/{acme['booking']['id']}"),
    ]

    for response in reads:
        problem(response, 404, "not_found")
    listed = outsider.client.get("/calendars").json()["results"]
    assert acme["calendar"] not in [c["id"] for c in listed]


def test_the_outsider_cannot_write_to_acmes_objects(sdr, outsider, acme):
    cal, held, booking = acme["calendar"], acme["hold"], acme["booking"]
    writes = [
        hold(outsider, cal, slot(minutes=30, offset_minutes=180), priority=1000),
        commit(outsider, cal, slot(minutes=30), priority=1000),
        outsider.client.post(f"/calendars/{cal}/commits", json={"hold_token": held["hold_token"]}),
        outsider.client.post(f"/holds/{held['id']}/extend", json={"hold_token": held["hold_token"]}),
        outsider.client.request("DELETE", f"/holds/{held['id']}", json={"hold_token": held["hold_token"]}),
        outsider.client.delete(f"/bookings/{booking['id']}"),
        outsider.client.patch(f"/calendars/{cal}", json={"name": "Mine now"}),
    ]

    for response in writes:
        problem(response, 404, "not_found")
    assert sdr.client.get(f"/holds/{held['id']}").json()["status"] == "held"
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["status"] == "committed"
    assert sdr.client.get(f"/calendars/{cal}").json()["name"] == "Shared calendar"
    assert [r.agent.public_id for r in rows_of(cal)] == [sdr.id, sdr.id]
    # Each refusal is audited in the outsider's own workspace, never in acme's.
    refused = audit_rows(agent_public_id=outsider.id, outcome="rejected")
    assert len(refused) == len(writes)
    assert {(r.workspace_id, r.http_status) for r in refused} == {(outsider.agent.workspace_id, 404)}


def test_the_outsider_cannot_pull_acmes_calendar_into_a_multi_calendar_hold(sdr, outsider, acme):
    own = create_calendar(outsider)

    response = hold(outsider, own["id"], slot(minutes=30), priority=1000, also_calendars=[acme["calendar"]])

    problem(response, 404, "not_found")
    assert rows_of(own["id"]) == []
    assert sdr.client.get(f"/holds/{acme['hold']['id']}").json()["status"] == "held"


def test_the_outsider_cannot_commit_acmes_hold_token_on_its_own_calendar(sdr, outsider, acme):
    own = create_calendar(outsider)

    response = outsider.client.post(
        f"/calendars/{own['id']}/commits", json={"hold_token": acme["hold"]["hold_token"]}
    )

    problem(response, 404, "not_found")
    assert sdr.client.get(f"/holds/{acme['hold']['id']}").json()["status"] == "held"
