"""Every error is RFC 9457 problem+json with the machine code in `error` and extra members at top level."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

from django.apps import apps
from django.conf import settings
from rest_framework import exceptions as drf

from agentcal.api.problems import as_domain_error
from agentcal.errors import AgentCalError
from tests.helpers import audit_rows, slot

PROBLEM_MEMBERS = {"type", "title", "status", "detail", "error"}


def assert_rfc9457(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert set(problem) >= PROBLEM_MEMBERS
    assert problem["status"] == status
    assert problem["error"] == error
    assert problem["type"] == f"urn:agentcal:problem:{error}"
    assert isinstance(problem["title"], str) and problem["title"]
    assert isinstance(problem["detail"], str) and problem["detail"]
    return problem


def test_a_401_is_problem_json_with_www_authenticate(anonymous):
    response = anonymous.get("/calendars")
    assert_rfc9457(response, 401, "unauthenticated")
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="agentcal"'


def test_a_path_no_endpoint_has_is_a_404_written_like_every_other_problem(sdr):
    response = sdr.client.get("/no-such-thing/é")

    problem = assert_rfc9457(response, 404, "not_found")
    assert problem["detail"] == "No endpoint at /v1/no-such-thing/é."
    # Compact UTF-8, as DRF's renderer writes the rest: an agent diffing answers sees no difference.
    assert response.content == json.dumps(problem, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_403_names_the_missing_scope_at_the_top_level(make_agent):
    reader = make_agent("reader", scopes=["calendars:read"])
    response = reader.client.post("/calendars", json={"name": "x"})
    problem = assert_rfc9457(response, 403, "insufficient_scope")
    assert problem["required_scope"] == "calendars:write"
    assert "calendars:write" in problem["detail"]


def test_a_slot_conflict_carries_its_details_at_the_top_level(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100)
    span = slot(hours_ahead=30)
    assert sdr.client.post(f"/calendars/{calendar['id']}/holds", json=span).status_code == 201

    response = rival.client.post(f"/calendars/{calendar['id']}/holds", json=span)

    problem = assert_rfc9457(response, 409, "slot_conflict")
    assert problem["retryable"] is False
    assert problem["conflicting"]["agent_id"] == sdr.id
    assert problem["conflicting_bucket"].startswith("BUCKET#")
    assert 1 <= len(problem["alternatives"]) <= 3


def test_a_precondition_failure_is_412(sdr, calendar):
    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(30), headers={"If-Match": '"999"'}
    )
    assert_rfc9457(response, 412, "precondition_failed")


def test_a_too_long_booking_is_422_with_limits(sdr, calendar):
    response = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(30, minutes=600))
    problem = assert_rfc9457(response, 422, "booking_too_long")
    assert problem["max_allowed_minutes"] == 480
    assert problem["requested_minutes"] == 600


def test_the_request_id_is_echoed_and_recorded_in_the_audit_row(sdr, calendar):
    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(30, minutes=600), headers={"X-Request-ID": "trace-42"}
    )
    assert response.status_code == 422
    assert response.headers["X-Request-ID"] == "trace-42"
    (row,) = audit_rows(request_id="trace-42")
    assert row.failure_reason == "booking_too_long"


def test_a_server_chosen_request_id_is_echoed_when_the_client_sends_none(anonymous):
    response = anonymous.get("/calendars")
    assert response.headers["X-Request-ID"].startswith("req_")


def _subclasses(base: type[AgentCalError]) -> Iterator[type[AgentCalError]]:
    for subclass in base.__subclasses__():
        yield subclass
        yield from _subclasses(subclass)


def test_the_readme_lists_every_error_the_server_can_answer() -> None:
    """Each domain error's code, and each framework error's as the API answers it, under its status in
    the README's Errors table: an agent's author reads that list to know what to handle."""
    # Every module of the product's apps that speaks of its errors, so each declared one is known.
    base = Path(settings.BASE_DIR)
    ours = {Path(config.path) for config in apps.get_app_configs() if Path(config.path).parent == base}
    for path in sorted(p for folder in ours | {base / "agentcal"} for p in folder.glob("**/*.py")):
        if "AgentCalError" in path.read_text():
            importlib.import_module(".".join(path.relative_to(base).with_suffix("").parts))
    answered = {(error.status, error.code) for error in _subclasses(AgentCalError) if error.code}
    framework: list[drf.APIException] = [drf.ParseError(), drf.UnsupportedMediaType("text/plain")]
    framework += [drf.MethodNotAllowed("PUT"), drf.NotAcceptable(), drf.PermissionDenied(), drf.Throttled()]
    for exc in framework:
        error = as_domain_error(exc)
        assert error is not None
        answered.add((error.status, error.code))
    readme = (base / "README.md").read_text()
    table = readme.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    listed = {
        (int(status), code)
        for status, codes in re.findall(r"^\| (\d{3}) \| (.*) \|$", table, flags=re.MULTILINE)
        for code in re.findall(r"`([a-z_]+)`", codes)
    }

    assert sorted(answered - listed) == []
