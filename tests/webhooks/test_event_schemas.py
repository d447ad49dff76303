"""Every event is published with its shape (the schema's `webhooks` section, and GET /v1/events as a union
told apart by `type`), and what the server sends is exactly that shape: no member missing, none beyond it.

Events that agents cause through the API are made here and checked as sent; the rest (mail, upstream
sync, invite answers, expiry) are checked on payloads recorded from the server's own runs
(event_samples.json), so each of the published event types is held to its schema."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from jsonschema import Draft202012Validator

from guardrails.services import agent_pause, agent_resume
from tests.approvals.helpers import request_approval
from tests.helpers import Persona, create_calendar, slot
from webhooks.models import EventType, OutboxEvent
from webhooks.outbox import webhook_body
from workspaces.actor import Actor

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLES = Path(__file__).with_name("event_samples.json")


def _closed(node: Any) -> Any:
    """The schema with every object closed to members it does not declare, so an undocumented member
    the server sends fails validation instead of passing unseen."""
    if isinstance(node, dict):
        closed = {key: _closed(value) for key, value in node.items()}
        if "properties" in closed and "additionalProperties" not in closed:
            closed["additionalProperties"] = False
        return closed
    if isinstance(node, list):
        return [_closed(item) for item in node]
    return node


@cache
def _document() -> dict[str, Any]:
    document: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(document, default=str))


@cache
def _validator(ref: str) -> Draft202012Validator:
    # _closed builds new objects: the cached document stays as generated.
    return Draft202012Validator({"$ref": ref, "components": _closed(_document()["components"])})


def _webhook_schema_ref(event_type: str) -> str:
    body = _document()["webhooks"][event_type]["post"]["requestBody"]["content"]["application/json"]
    return str(body["schema"]["$ref"])


def _problems(validator: Draft202012Validator, instance: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def test_every_event_type_is_published_as_a_webhook_and_in_the_event_union() -> None:
    document = _document()
    assert set(document["webhooks"]) == set(EventType.values)
    union = document["components"]["schemas"]["Event"]
    assert set(union["discriminator"]["mapping"]) == set(EventType.values)
    for event_type in EventType.values:
        webhook = document["webhooks"][event_type]["post"]
        assert webhook["summary"] and webhook["description"], event_type
        body = document["components"]["schemas"][_webhook_schema_ref(event_type).rsplit("/", 1)[1]]
        assert body["properties"]["type"]["enum"] == [event_type]
        assert set(body["required"]) == {"id", "type", "timestamp", "data"}


@pytest.mark.parametrize("event_type", EventType.values)
def test_recorded_payloads_of_each_event_fit_its_published_shape(event_type: str) -> None:
    samples = json.loads(SAMPLES.read_text())
    assert samples.get(event_type), f"no recorded payload of {event_type}"
    validator = _validator(_webhook_schema_ref(event_type))
    for data in samples[event_type]:
        body = {"id": "evt_recorded", "type": event_type, "timestamp": "2026-12-02T10:00:00Z", "data": data}
        assert _problems(validator, body) == [], json.dumps(data)[:300]


def test_events_agents_cause_are_sent_and_listed_in_their_published_shape(
    sdr: Persona, exec_assistant: Persona
) -> None:
    calendar = create_calendar(sdr, hold_ttl_seconds=60)["id"]

    released = sdr.client.post(f"/calendars/{calendar}/holds", json=slot(30)).json()
    token = {"hold_token": released["hold_token"]}
    assert sdr.client.request("DELETE", f"/holds/{released['id']}", json=token).status_code == 200

    evicted = sdr.client.post(f"/calendars/{calendar}/holds", json=slot(32)).json()
    taken = exec_assistant.client.post(f"/calendars/{calendar}/holds", json={**slot(32), "priority": 600})
    assert taken.status_code == 201, taken.text
    assert sdr.client.get(f"/holds/{evicted['id']}").json()["status"] == "evicted"

    booked = sdr.client.post(f"/calendars/{calendar}/commits", json=slot(34)).json()
    moved = sdr.client.post(f"/bookings/{booked['id']}/move", json=slot(36))
    assert moved.status_code == 200, moved.text
    bumped = exec_assistant.client.post(f"/calendars/{calendar}/commits", json={**slot(36), "priority": 600})
    assert bumped.status_code == 201, bumped.text

    cancelled = sdr.client.post(f"/calendars/{calendar}/commits", json=slot(38)).json()
    assert sdr.client.delete(f"/bookings/{cancelled['id']}").status_code == 200

    approval = request_approval(sdr).json()
    assert sdr.client.post(f"/approvals/{approval['id']}/cancel").status_code == 200

    owner = Actor(workspace=sdr.agent.workspace, agent=None, user_email="owner@acme.example")
    agent_pause(actor=owner, agent=sdr.agent)
    agent_resume(actor=owner, agent=sdr.agent)

    sent = list(OutboxEvent.objects.filter(agent=sdr.agent))
    assert {event.event_type for event in sent} == {
        "hold.created",
        "hold.released",
        "hold.evicted",
        "booking.committed",
        "booking.moved",
        "booking.bumped",
        "booking.cancelled",
        "approval.requested",
        "approval.cancelled",
        "agent.paused",
        "agent.resumed",
    }
    for event in sent:
        validator = _validator(_webhook_schema_ref(event.event_type))
        assert _problems(validator, json.loads(webhook_body(event))) == [], event.event_type

    listed = sdr.client.get("/events", params={"limit": 100}).json()["results"]
    assert len(listed) == len(sent)
    union = _validator("#/components/schemas/Event")
    for event in listed:
        assert _problems(union, event) == [], event["type"]
