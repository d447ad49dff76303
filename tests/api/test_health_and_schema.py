"""GET /v1/health and GET /v1/schema answer without auth."""

from __future__ import annotations

import json
import socket
import time

import yaml
from drf_spectacular.generators import SchemaGenerator

from agentcal.api import health
from agentcal.api.schema_view import SchemaView
from tests.guardrails.helpers import set_limits
from tests.helpers import Persona


def test_health_reports_database_and_redis_without_auth(anonymous):
    response = anonymous.get("/health")

    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok"}


def test_health_ignores_a_bad_key(anonymous):
    response = anonymous.get("/health", headers={"Authorization": "Bearer avs_live_nonsense"})
    assert response.status_code == 200, response.text


def test_a_flood_of_health_checks_waits_on_a_silent_redis_once(anonymous, settings, monkeypatch):
    """No key is needed, and while Redis accepts connections but never answers each check waits a second:
    asked for every request, a few keyless clients held every worker. The answer is reused for a while."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connections complete; nothing is ever said
        settings.REDIS_URL = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        monkeypatch.setattr(health, "_last_checks", None)
        started = time.monotonic()
        answers = [anonymous.get("/health") for _ in range(5)]
        elapsed = time.monotonic() - started

    assert [answer.status_code for answer in answers] == [503] * 5
    assert answers[-1].json() == {"status": "degraded", "database": "ok", "redis": "error: TimeoutError"}
    assert elapsed < health.CHECK_REUSE_SECONDS  # one wait of a second, not five


def test_health_and_schema_answer_a_key_refused_for_its_rate(sdr: Persona) -> None:
    # What the schema promises for them: no 4xx, whatever key the caller sends.
    set_limits(sdr, requests_per_second=0.01, request_burst=1)
    sdr.client.get("/calendars")
    assert sdr.client.get("/calendars").status_code == 429
    assert sdr.client.get("/health").status_code == 200
    assert sdr.client.get("/schema").status_code == 200


def test_schema_is_an_openapi_document_with_the_hold_endpoint(anonymous):
    response = anonymous.get("/schema")

    assert response.status_code == 200, response.text
    document = yaml.safe_load(response.text)
    assert document["openapi"].startswith("3.")
    assert "/v1/calendars/{calendar_id}/holds" in document["paths"]
    assert "post" in document["paths"]["/v1/calendars/{calendar_id}/holds"]


def test_schema_is_available_as_json(anonymous):
    response = anonymous.get("/schema", params={"format": "json"})

    assert response.status_code == 200, response.text
    document = json.loads(response.text)
    paths = document["paths"]
    for path in (
        "/v1/calendars",
        "/v1/calendars/{calendar_id}",
        "/v1/calendars/{calendar_id}/availability",
        "/v1/calendars/{calendar_id}/holds",
        "/v1/calendars/{calendar_id}/commits",
        "/v1/calendars/{calendar_id}/bookings",
        "/v1/holds/{hold_id}",
        "/v1/holds/{hold_id}/extend",
        "/v1/bookings/{booking_id}",
        "/v1/audit",
    ):
        assert path in paths, sorted(paths)


def test_the_schema_is_made_once_per_format_however_often_it_is_asked_for(anonymous, monkeypatch):
    """It takes no key and costs about a third of a second of CPU to make: made for every request, a few
    keyless clients kept every worker busy. Each process makes it once per format."""
    made = []
    get_schema = SchemaGenerator.get_schema

    def counted(generator: SchemaGenerator, *args: object, **kwargs: object) -> object:
        made.append(1)
        return get_schema(generator, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    monkeypatch.setattr(SchemaView, "_served", {})

    yaml_answers = [anonymous.get("/schema") for _ in range(3)]
    json_answers = [
        anonymous.get("/schema", headers={"Accept": "application/json; indent=2"}) for _ in range(3)
    ]

    assert len(made) == 2
    assert {answer.content for answer in yaml_answers} == {yaml_answers[0].content}
    assert yaml_answers[0].headers["content-type"] == "application/vnd.oai.openapi; charset=utf-8"
    assert json_answers[0].headers["content-type"] == "application/json"
    assert json_answers[2].json() == yaml.safe_load(yaml_answers[2].text)
    assert "/v1/schema" not in json_answers[2].json()["paths"]


def test_the_first_request_for_the_schema_cannot_write_into_everyones_copy(anonymous, monkeypatch):
    """The copy is made by whichever request comes first: its query's `version` and `lang`, which the
    generator would write into the document, are not honoured."""
    monkeypatch.setattr(SchemaView, "_served", {})
    first = anonymous.get("/schema", params={"version": "9.9-evil", "lang": "de"})
    later = anonymous.get("/schema")

    assert first.content == later.content
    assert b"evil" not in later.content
    assert yaml.safe_load(later.text)["info"]["version"] == "1"
