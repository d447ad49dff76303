"""The emergency stop: a paused agent's (or workspace's) writes answer 423 in every web process within
a second, its reads still answer; audited, announced, optionally releasing its live holds; resumed in
one step; the same switch for scripts."""

from __future__ import annotations

import time
from io import StringIO
from typing import Any

from django.core.management import call_command

from guardrails.services import agent_pause, agent_resume, workspace_pause, workspace_resume
from tests.helpers import Persona, audit_rows, create_calendar, http_client, slot
from webhooks.models import OutboxEvent
from workspaces.actor import Actor
from workspaces.models import Agent

OWNER = "owner@acme.example"


def _owner(persona: Persona) -> Actor:
    return Actor(workspace=persona.agent.workspace, agent=None, user_email=OWNER)


def test_a_pause_reaches_every_web_worker_within_a_second_and_reads_still_work(
    sdr: Persona, app_server: str
) -> None:
    with http_client(f"{app_server}/v1", headers={"Authorization": f"Bearer {sdr.raw_key}"}) as client:
        calendar = client.post("/calendars", json={"name": "Berlin office"}).json()["id"]
        # Both gunicorn workers have served (and cached) the key before the pause.
        for i in range(6):
            assert (
                client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=30 + i)).status_code == 201
            )

        stopped = agent_pause(actor=_owner(sdr), agent=sdr.agent)
        assert stopped.changed
        paused_at = time.monotonic()
        time.sleep(1.0)
        answers = [
            client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=40 + i)) for i in range(8)
        ]
        assert time.monotonic() - paused_at < 3
        assert {a.status_code for a in answers} == {423}
        problem = answers[0].json()
        assert (
            problem["error"] == "agent_paused" and problem["paused"] == "agent" and not problem["retryable"]
        )
        assert client.get(f"/calendars/{calendar}/availability", params=_day()).status_code == 200
        me = client.get("/me").json()
        assert me["paused"]["scope"] == "agent"

        assert agent_resume(actor=_owner(sdr), agent=sdr.agent)
        time.sleep(1.0)
        resumed = [
            client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=50 + i)) for i in range(4)
        ]
        assert {a.status_code for a in resumed} == {201}
        assert client.get("/me").json()["paused"] is None

    paused_rows = audit_rows(event_type="agent.paused")
    assert len(paused_rows) == 1 and paused_rows[0].actor_user == OWNER
    assert len(audit_rows(event_type="agent.resumed")) == 1
    events = list(OutboxEvent.objects.filter(agent=sdr.agent).values_list("event_type", flat=True))
    assert "agent.paused" in events and "agent.resumed" in events


def _day() -> dict[str, str]:
    from datetime import UTC, datetime, timedelta

    start = datetime.now(UTC) + timedelta(days=1)
    return {"start": start.isoformat(), "end": (start + timedelta(hours=8)).isoformat()}


def test_pausing_the_workspace_stops_every_agent_and_can_release_their_holds(make_agent: Any) -> None:
    first, second = make_agent("first"), make_agent("second")
    calendar = create_calendar(first)["id"]
    held = [
        first.client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=30 + i)) for i in range(2)
    ]
    booked = second.client.post(f"/calendars/{calendar}/commits", json=slot(hours_ahead=40))
    assert [h.status_code for h in held] == [201, 201] and booked.status_code == 201

    stopped = workspace_pause(actor=_owner(first), release_holds=True)
    assert stopped.changed and stopped.released == 2
    time.sleep(0.6)
    for persona in (first, second):
        refused = persona.client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=50))
        assert refused.status_code == 423 and refused.json()["paused"] == "workspace"
    assert [first.client.get(f"/holds/{h.json()['id']}").json()["status"] for h in held] == ["released"] * 2
    assert second.client.get(f"/bookings/{booked.json()['id']}").json()["status"] == "committed"
    # Each agent's endpoints hear of it.
    for persona in (first, second):
        assert OutboxEvent.objects.filter(agent=persona.agent, event_type="workspace.paused").count() == 1
    # Refused writes are audited once per window, not one by one.
    for _ in range(3):
        first.client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=51))
    assert len(audit_rows(agent_public_id=first.agent.public_id, failure_reason="agent_paused")) == 1

    assert workspace_resume(actor=_owner(first))
    time.sleep(0.6)
    assert first.client.post(f"/calendars/{calendar}/holds", json=slot(hours_ahead=52)).status_code == 201


def test_the_command_pauses_and_resumes_for_scripts(sdr: Persona) -> None:
    workspace = sdr.agent.workspace.slug
    out = StringIO()
    call_command("pause_agents", "--workspace", workspace, "--agent", "sdr", stdout=out)
    assert "agent sdr: paused" in out.getvalue()
    assert Agent.objects.get(pk=sdr.agent.pk).paused_at is not None
    call_command("pause_agents", "--workspace", workspace, "--agent", "sdr", "--resume", stdout=out)
    assert Agent.objects.get(pk=sdr.agent.pk).paused_at is None
    rows = audit_rows(event_type__in=["agent.paused", "agent.resumed"])
    assert [r.actor_user for r in rows] == ["operator (manage.py pause_agents)"] * 2
