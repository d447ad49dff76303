"""What code generators need from /v1/schema beyond shapes: a name and a sentence for every operation, a
server, and the headers agents send and read (Idempotency-Key, If-Match; ETag, Retry-After, RateLimit-*),
each declared where the server really takes or sends it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import yaml

from tests.guardrails.helpers import set_limits
from tests.helpers import Persona, create_calendar, iso, slot

MUTATING = {"post", "put", "patch", "delete"}


def _schema(anonymous: httpx.Client) -> dict[str, Any]:
    response = anonymous.get("/schema")
    assert response.status_code == 200
    document: dict[str, Any] = yaml.safe_load(response.text)
    return document


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()]


def test_every_operation_has_a_unique_id_a_summary_and_a_description(anonymous: httpx.Client) -> None:
    document = _schema(anonymous)
    assert document["servers"] == [{"url": "/", "description": "This server"}]
    operations = _operations(document)
    ids = [op["operationId"] for _, _, op in operations]
    assert len(ids) == len(set(ids))
    verbs = {"get", "list", "create", "update", "delete", "cancel", "request", "check", "sync", "download"}
    verbs |= {"reply", "send", "disable", "replay", "find", "release", "extend", "search", "commit", "move"}
    for operation_id in ids:  # what generated clients name their functions by: a verb first
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", operation_id), operation_id
        assert operation_id.split("_")[0] in verbs, operation_id
    for path, method, op in operations:
        assert re.fullmatch(r"[A-Z][^.]{3,80}", op.get("summary", "")), (method, path, op.get("summary"))
        assert op.get("description"), (method, path)


def test_writes_declare_idempotency_key_and_the_writes_that_take_if_match_declare_it(
    anonymous: httpx.Client,
) -> None:
    document = _schema(anonymous)
    if_match = set()
    for path, method, op in _operations(document):
        headers = {p["name"]: p for p in op.get("parameters", []) if p["in"] == "header"}
        if method in MUTATING and path != "/v1/health":
            assert "Idempotency-Key" in headers, (method, path)
            assert (
                not headers["Idempotency-Key"]["required"]
                if "required" in headers["Idempotency-Key"]
                else True
            )
        if "If-Match" in headers:
            if_match.add((method, path))
    assert if_match == {
        ("post", "/v1/calendars/{calendar_id}/holds"),
        ("post", "/v1/calendars/{calendar_id}/commits"),
        ("post", "/v1/bookings/{booking_id}/move"),
    }


def test_the_declared_response_headers_are_the_ones_the_server_sends(
    anonymous: httpx.Client, sdr: Persona
) -> None:
    document = _schema(anonymous)
    hold_op = document["paths"]["/v1/calendars/{calendar_id}/holds"]["post"]
    declared_201 = set(hold_op["responses"]["201"]["headers"])
    assert {
        "ETag",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "RateLimit-Policy",
    } <= declared_201
    assert "Retry-After" in hold_op["responses"]["429"]["headers"]

    calendar = create_calendar(sdr)
    made = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30), headers={"Idempotency-Key": "k-1"}
    )
    assert made.status_code == 201
    sent = {name for name in declared_201 if name in made.headers}  # httpx: case-insensitive
    assert sent == declared_201 - {"Idempotent-Replayed"}
    replayed = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30), headers={"Idempotency-Key": "k-1"}
    )
    assert replayed.headers["Idempotent-Replayed"] == "true"

    set_limits(sdr, requests_per_second=0.01, request_burst=1)
    sdr.client.get("/calendars")
    refused = sdr.client.get("/calendars")
    assert refused.status_code == 429
    declared_429 = set(document["paths"]["/v1/calendars"]["get"]["responses"]["429"]["headers"])
    # A refusal from memory (the first middleware) knows no reset or policy; one from the bucket does.
    sent_429 = {name for name in declared_429 if name in refused.headers}
    assert declared_429 - sent_429 <= {"RateLimit-Reset", "RateLimit-Policy"}


def test_zones_are_named_not_enumerated_and_metadata_is_free_form(anonymous: httpx.Client) -> None:
    schemas = _schema(anonymous)["components"]["schemas"]
    zone = schemas["CalendarInput"]["properties"]["timezone"]
    assert "enum" not in zone and zone["type"] == "string" and re.fullmatch(zone["pattern"], "Europe/Berlin")
    assert re.fullmatch(zone["pattern"], "Etc/GMT+5") and not re.fullmatch(zone["pattern"], "Berlin time")
    for name, schema in schemas.items():
        metadata = schema.get("properties", {}).get("metadata")
        if metadata is not None and metadata.get("type") == "object":
            assert metadata.get("additionalProperties") is True, name


def test_the_schema_is_valid_openapi_and_generates_without_a_warning(tmp_path: Any) -> None:
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


def test_each_problem_family_is_typed_with_its_members(anonymous: httpx.Client, sdr: Persona) -> None:
    document = _schema(anonymous)
    responses = document["paths"]["/v1/calendars/{calendar_id}/holds"]["post"]["responses"]
    family = {
        status: answer["content"]["application/problem+json"]["schema"]["$ref"].rsplit("/", 1)[1]
        for status, answer in responses.items()
        if "application/problem+json" in answer.get("content", {})
    }
    assert family["409"] == "ConflictProblemOutput" and family["429"] == "TooManyRequestsProblemOutput"
    conflict = document["components"]["schemas"]["ConflictProblemOutput"]["properties"]
    span = document["components"]["schemas"]["FreeSpanOutput"]["properties"]
    # What a real 409 carries is what the family declares.
    calendar = create_calendar(sdr)
    assert sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30)).status_code == 201
    refused = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30)).json()
    assert set(refused) <= set(conflict)
    assert refused["alternatives"] and all(set(a) == set(span) for a in refused["alternatives"])
    assert conflict["conflicting_bucket"]["description"].startswith("slot_conflict: `BUCKET#`")
    # And a 422: the calendar rule that refused, with the numbers behind it.
    assert family["422"] == "UnprocessableProblemOutput"
    unprocessable = document["components"]["schemas"]["UnprocessableProblemOutput"]["properties"]
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    too_long = {"start_time": iso(start), "end_time": iso(start + timedelta(days=3))}
    answer = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=too_long)
    assert answer.status_code == 422 and answer.json()["error"] == "booking_too_long"
    assert "max_buckets_allowed" in answer.json() and set(answer.json()) <= set(unprocessable)
