"""Input a careless client or an attacker sends: a 4xx problem, never a 500, and the refusal is audited."""

from __future__ import annotations

import pytest

from audit.models import AuditRecord, Outcome
from tests.api.test_bad_input import assert_problem, post_raw, writes_nothing
from tests.helpers import slot

LONG_ID_SUFFIX = "x" * 40


def refusals(status: int) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(outcome=Outcome.REJECTED, http_status=status).order_by("id"))


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/calendars/cal_{x}"),
        ("GET", "/calendars/cal_{x}/availability?start=2030-01-01T00:00:00Z&end=2030-01-02T00:00:00Z"),
        ("POST", "/calendars/cal_{x}/holds"),
        ("POST", "/calendars/cal_{x}/commits"),
        ("GET", "/holds/hld_{x}"),
        ("POST", "/holds/hld_{x}/extend"),
        ("DELETE", "/holds/hld_{x}?hold_token=t"),
        ("GET", "/bookings/bk_{x}"),
        ("DELETE", "/bookings/bk_{x}"),
        ("GET", "/approvals/appr_{x}"),
        ("GET", "/webhook-endpoints/whe_{x}"),
    ],
)
def test_an_id_longer_than_any_id_is_404_and_audited(sdr, method, path):
    url = path.format(x=LONG_ID_SUFFIX)
    body = {**slot(30), "hold_token": "t"} if method == "POST" and "holds" in url else None
    if url.endswith("/commits"):
        body = slot(30)
    response = sdr.client.request(method, url, json=body)
    assert_problem(response, 404, "not_found")
    refusal = refusals(404)[-1]
    assert refusal.agent_public_id == sdr.id
    assert refusal.details["path"].startswith("/v1/")


@pytest.mark.parametrize("bad_id", ["cal_a%00b", "cal_%F0%9F%98%80", "cal_a%20b", "cal_ab%C3"])
def test_an_id_with_characters_no_id_has_is_404(sdr, bad_id):
    response = sdr.client.get(f"/calendars/{bad_id}")
    assert_problem(response, 404, "not_found")


@pytest.mark.parametrize("offset", ["+16:00", "-16:00", "+23:59", "+99:00"])
def test_a_utc_offset_beyond_postgresqls_range_is_400_invalid_range(sdr, calendar, offset):
    audit = sdr.client.get("/audit", params={"since": f"2027-01-01T00:00:00{offset}"})
    assert_problem(audit, 400, "invalid_range")
    availability = sdr.client.get(
        f"/calendars/{calendar['id']}/availability",
        params={"start": f"2030-01-01T00:00:00{offset}", "end": "2030-01-02T00:00:00Z"},
    )
    assert_problem(availability, 400, "invalid_range")
    bookings = sdr.client.get(
        f"/calendars/{calendar['id']}/bookings", params={"end": f"2030-01-01T00:00:00{offset}"}
    )
    assert_problem(bookings, 400, "invalid_range")
    with writes_nothing():
        hold = sdr.client.post(
            f"/calendars/{calendar['id']}/holds",
            json={"start_time": f"2030-01-01T10:00:00{offset}", "end_time": "2030-01-01T10:30:00Z"},
        )
    assert_problem(hold, 400, "invalid_range")


def test_the_widest_offset_postgresql_accepts_still_works(sdr, calendar):
    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds",
        json={"start_time": "2030-01-02T10:00:00+14:00", "end_time": "2030-01-02T10:30:00+14:00"},
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "span",
    [
        {"start_time": "0001-01-01T00:00:00Z", "end_time": "0001-01-01T00:30:00Z"},
        {"start_time": "0001-01-01T00:00:00+01:00", "end_time": "0001-01-01T00:30:00+01:00"},
        {"start_time": "9999-12-31T23:00:00Z", "end_time": "9999-12-31T23:30:00Z"},
        {"start_time": "9999-12-31T23:00:00-01:00", "end_time": "9999-12-31T23:30:00-01:00"},
    ],
)
def test_dates_at_the_ends_of_the_calendar_are_400_invalid_range(sdr, calendar, span):
    for endpoint in ("holds", "commits"):
        with writes_nothing():
            first = sdr.client.post(f"/calendars/{calendar['id']}/{endpoint}", json=span)
        assert_problem(first, 400, "invalid_range")
    availability = sdr.client.get(
        f"/calendars/{calendar['id']}/availability",
        params={"start": span["start_time"], "end": span["end_time"]},
    )
    assert_problem(availability, 400, "invalid_range")


def test_a_late_but_plausible_slot_held_twice_gets_a_409_with_alternatives(sdr, exec_assistant, calendar):
    span = {"start_time": "2999-12-31T23:00:00Z", "end_time": "2999-12-31T23:30:00Z"}
    assert sdr.client.post(f"/calendars/{calendar['id']}/commits", json=span).status_code == 201
    second = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=span)
    problem = assert_problem(second, 409, "slot_conflict")
    assert problem["alternatives"]


def test_deeply_nested_json_is_400(sdr, calendar):
    with writes_nothing():
        response = post_raw(sdr, f"/calendars/{calendar['id']}/holds", b"[" * 50_000)
    assert_problem(response, 400, "malformed_json")
    refusal = refusals(400)[-1]
    assert refusal.failure_reason == "malformed_json"


def test_json_nested_deeper_than_the_limit_is_refused_even_when_well_formed(sdr, calendar):
    nested = b'{"a":' * 200 + b"1" + b"}" * 200
    body = (
        b'{"start_time": "2030-01-01T10:00:00Z", "end_time": "2030-01-01T10:30:00Z", "metadata": '
        + nested
        + b"}"
    )
    with writes_nothing():
        response = post_raw(sdr, f"/calendars/{calendar['id']}/holds", body)
    assert_problem(response, 400, "malformed_json")


@pytest.mark.parametrize("text", [r"\u0000", r"a\u0000b", r"\ud800", r"\udfff x", r"\ud83d"])
@pytest.mark.parametrize("field", ["title", "metadata", "attendees", "metadata_key"])
def test_nul_and_lone_surrogates_in_json_strings_are_400(sdr, calendar, text, field):
    start, end = '"2030-01-01T10:00:00Z"', '"2030-01-01T10:30:00Z"'
    value = {
        "title": f'"{text}"',
        "metadata": f'{{"note": "{text}"}}',
        "attendees": f'["{text}"]',
        "metadata_key": f'{{"{text}": 1}}',
    }[field]
    name = "metadata" if field == "metadata_key" else field
    body = f'{{"start_time": {start}, "end_time": {end}, "{name}": {value}}}'.encode()
    with writes_nothing():
        response = post_raw(sdr, f"/calendars/{calendar['id']}/holds", body)
    assert_problem(response, 400, "malformed_json")


def test_nul_in_approval_evidence_and_state_is_400(sdr):
    for body in (
        rb'{"summary": "Book it", "evidence": {"quote": "a\u0000"}}',
        rb'{"summary": "Book it", "evidence": {}, "state": {"k": "\udc00"}}',
    ):
        response = post_raw(sdr, "/approvals", body)
        assert_problem(response, 400, "malformed_json")


def test_a_body_too_large_for_django_is_413_problem_json(sdr, calendar):
    body = b'{"title": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    with writes_nothing():
        response = post_raw(sdr, f"/calendars/{calendar['id']}/holds", body)
    problem = assert_problem(response, 413, "payload_too_large")
    assert problem["max_bytes"] > 0
    assert refusals(413)[-1].agent_public_id == sdr.id


def test_a_query_string_with_nul_is_400_not_500(sdr, calendar):
    response = sdr.client.get(f"/calendars/{calendar['id']}/bookings", params={"cursor": "a\x00b"})
    assert response.status_code == 400, response.text
    events = sdr.client.get("/events", params={"type": "hold.created\x00"})
    assert events.status_code in (200, 400), events.text
    audit = sdr.client.get("/audit", params={"event_type": "x\x00", "agent": "agt_\x00"})
    assert audit.status_code in (200, 400), audit.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": 0}, "name"),
        ({"name": "Team", "slot_minutes": "30"}, "slot_minutes"),
        ({"name": "Team", "slot_minutes": 30.5}, "slot_minutes"),
        ({"name": "Team", "hold_ttl_seconds": True}, "hold_ttl_seconds"),
        ({"name": " \t"}, "name"),
    ],
)
def test_a_value_of_the_wrong_json_type_or_blank_text_is_400_naming_the_field(sdr, body, field):
    response = sdr.client.post("/calendars", json=body)
    problem = assert_problem(response, 400, "invalid_request")
    assert list(problem["errors"]) == [field]


def test_a_whole_number_written_with_a_fraction_is_an_integer_as_the_schema_says(sdr):
    # OpenAPI 3.1's JSON Schema counts 30.0 as an integer; some JSON libraries write whole numbers so.
    response = sdr.client.post("/calendars", json={"name": "Team", "slot_minutes": 30.0})
    assert response.status_code == 201, response.text
    assert response.json()["slot_minutes"] == 30


def test_text_is_kept_as_sent(sdr):
    response = sdr.client.post("/calendars", json={"name": "  Sales team "})
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "  Sales team "
