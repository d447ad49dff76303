"""Bad input is refused as problem+json with the documented code, and writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from audit.models import AuditRecord, Outcome
from bookings.models import Reservation
from tests.helpers import create_calendar, iso, slot

PROBLEM = "application/problem+json"


@contextmanager
def writes_nothing() -> Iterator[None]:
    """No reservation and no success audit row may appear (a rejection's own audit row is expected)."""
    reservations = Reservation.objects.count()
    successes = AuditRecord.objects.filter(outcome=Outcome.SUCCESS).count()
    yield
    assert Reservation.objects.count() == reservations
    assert AuditRecord.objects.filter(outcome=Outcome.SUCCESS).count() == successes


def assert_problem(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["status"] == status
    assert problem["error"] == error
    return problem


def post_raw(persona, path: str, content: bytes):
    return persona.client.post(path, content=content, headers={"Content-Type": "application/json"})


def test_malformed_json_is_400_malformed_json(sdr, calendar):
    with writes_nothing():
        response = post_raw(
            sdr, f"/calendars/{calendar['id']}/holds", b'{"start_time": "2030-01-01T10:00:00Z",'
        )
    assert_problem(response, 400, "malformed_json")


def test_malformed_json_with_an_idempotency_key_is_refused_before_the_key_is_claimed(sdr, calendar):
    with writes_nothing():
        response = sdr.client.post(
            f"/calendars/{calendar['id']}/holds",
            content=b"{not json",
            headers={"Content-Type": "application/json", "Idempotency-Key": "k1"},
        )
    assert_problem(response, 400, "malformed_json")
    retry = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(30), headers={"Idempotency-Key": "k1"}
    )
    assert retry.status_code == 201, retry.text


def test_a_json_array_body_is_400(sdr, calendar):
    with writes_nothing():
        response = post_raw(sdr, f"/calendars/{calendar['id']}/holds", json.dumps([slot(30)]).encode())
    assert_problem(response, 400, "invalid_request")


@pytest.mark.parametrize("field", ["start_time", "end_time"])
def test_a_naive_datetime_is_400_invalid_range(sdr, calendar, field):
    body = slot(30)
    body[field] = body[field].removesuffix("Z")
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=body)
    assert_problem(response, 400, "invalid_range")


def test_a_datetime_that_is_not_rfc3339_is_400_invalid_range(sdr, calendar):
    body = {**slot(30), "start_time": "next tuesday"}
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=body)
    assert_problem(response, 400, "invalid_range")


@pytest.mark.parametrize("minutes", [0, -30], ids=["empty", "reversed"])
def test_end_not_after_start_is_400_invalid_range(sdr, calendar, minutes):
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    body = {"start_time": iso(start), "end_time": iso(start + timedelta(minutes=minutes))}
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=body)
    assert_problem(response, 400, "invalid_range")


@pytest.mark.parametrize("endpoint", ["holds", "commits"])
def test_a_span_in_the_past_is_400_invalid_range(sdr, calendar, endpoint):
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/{endpoint}", json=slot(hours_ahead=-3))
    assert_problem(response, 400, "invalid_range")


def test_an_unknown_calendar_is_404_not_found(sdr):
    with writes_nothing():
        response = sdr.client.post("/calendars/cal_doesnotexist0000000/holds", json=slot(30))
    assert_problem(response, 404, "not_found")


def test_another_workspaces_calendar_is_404_not_403(sdr, outsider, calendar):
    with writes_nothing():
        hold = outsider.client.post(f"/calendars/{calendar['id']}/holds", json=slot(30))
        read = outsider.client.get(f"/calendars/{calendar['id']}")
        rename = outsider.client.patch(f"/calendars/{calendar['id']}", json={"name": "mine now"})
    for response in (hold, read, rename):
        assert_problem(response, 404, "not_found")
    assert sdr.client.get(f"/calendars/{calendar['id']}").json()["name"] == "Shared calendar"


def test_another_workspaces_hold_is_404(sdr, outsider, calendar):
    hold = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(30)).json()
    with writes_nothing():
        read = outsider.client.get(f"/holds/{hold['id']}")
        release = outsider.client.request(
            "DELETE", f"/holds/{hold['id']}", json={"hold_token": hold["hold_token"]}
        )
    assert_problem(read, 404, "not_found")
    assert_problem(release, 404, "not_found")
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "held"


def test_a_body_over_256_kib_is_413_payload_too_large(sdr, calendar):
    body = {**slot(30), "title": "x" * (257 * 1024)}
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=body)
    problem = assert_problem(response, 413, "payload_too_large")
    assert problem["max_bytes"] == 256 * 1024


def test_an_unknown_field_is_400_naming_the_field(sdr, calendar):
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/holds", json={**slot(30), "ttl_second": 60})
    problem = assert_problem(response, 400, "invalid_request")
    assert "ttl_second" in problem["errors"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority", "high"),
        ("ttl_seconds", 0),
        ("ttl_seconds", 99999),
        ("ttl_seconds", "soon"),
        ("priority", -1),
    ],
)
def test_a_wrongly_typed_or_out_of_range_field_is_400(sdr, calendar, field, value):
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/holds", json={**slot(30), field: value})
    problem = assert_problem(response, 400, "invalid_request")
    assert field in problem["errors"]


def test_a_missing_required_field_is_400_naming_it(sdr, calendar):
    with writes_nothing():
        response = sdr.client.post(
            f"/calendars/{calendar['id']}/holds", json={"start_time": slot(30)["start_time"]}
        )
    problem = assert_problem(response, 400, "invalid_request")
    assert "end_time" in problem["errors"]


def test_an_unknown_url_under_v1_is_404_problem_json(sdr, anonymous):
    for client in (sdr.client, anonymous):
        response = client.get("/no-such-endpoint")
        problem = assert_problem(response, 404, "not_found")
        assert problem["type"] == "urn:agentcal:problem:not_found"


def test_a_commit_with_both_hold_token_and_start_time_is_400(sdr, calendar):
    hold = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(30)).json()
    body = {"hold_token": hold["hold_token"], "start_time": slot(30)["start_time"]}
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/commits", json=body)
    problem = assert_problem(response, 400, "invalid_request")
    assert "start_time" in problem["errors"]
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "held"


def test_a_commit_with_neither_hold_token_nor_span_is_400(sdr, calendar):
    with writes_nothing():
        response = sdr.client.post(f"/calendars/{calendar['id']}/commits", json={"title": "?"})
    problem = assert_problem(response, 400, "invalid_request")
    assert {"start_time", "end_time"} <= set(problem["errors"])


def test_a_non_json_content_type_is_415(sdr, calendar):
    with writes_nothing():
        response = sdr.client.post(
            f"/calendars/{calendar['id']}/holds",
            content=b"start_time=now",
            headers={"Content-Type": "text/plain"},
        )
    assert_problem(response, 415, "unsupported_media_type")


def test_a_malformed_calendar_setting_is_400(sdr):
    response = sdr.client.post("/calendars", json={"name": "Bad", "timezone": "Mars/Olympus"})
    problem = assert_problem(response, 400, "invalid_request")
    assert "timezone" in problem["errors"]
    # A region is a folder of the zone database, not a zone.
    region = sdr.client.post("/calendars", json={"name": "Bad", "timezone": "Europe"})
    assert "timezone" in assert_problem(region, 400, "invalid_request")["errors"]
    # The host's own zone (Debian's zoneinfo/localtime link) is no zone of the database: whatever the
    # server's clock is set to would silently become the calendar's working hours.
    host = sdr.client.post("/calendars", json={"name": "Bad", "timezone": "localtime"})
    assert "timezone" in assert_problem(host, 400, "invalid_request")["errors"]
    assert create_calendar(sdr)["timezone"] == "UTC"


def test_an_unsupported_method_is_405_problem_json(sdr, calendar):
    # A method the endpoint does not implement is not a scope problem: every scope is granted here.
    with writes_nothing():
        put = sdr.client.put(f"/calendars/{calendar['id']}", json={"name": "Replaced"})
        post = sdr.client.post("/audit", json={})
    for response in (put, post):
        assert_problem(response, 405, "method_not_allowed")
