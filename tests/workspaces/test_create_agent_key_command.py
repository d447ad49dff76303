"""`manage.py create_agent_key`: bootstrap a workspace, agent and key; print the raw key alone, last."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.helpers import http_client
from workspaces.keys import api_key_verify, lookup_prefix
from workspaces.models import Agent, ApiKey, Scope, Workspace


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_agent_key", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def last_line(output: str) -> str:
    return output.rstrip("\n").splitlines()[-1]


def test_it_creates_workspace_agent_and_key_and_prints_the_raw_key_last(transactional_db, live_server):
    out, err = run(
        "--workspace=initech",
        "--agent=Booking Bot",
        "--scopes=calendars:read,bookings:write",
        "--priority=300",
        "--max-priority=600",
    )

    raw = last_line(out)
    assert raw.startswith("avs_live_") and " " not in raw
    workspace = Workspace.objects.get(slug="initech")
    agent = Agent.objects.get(workspace=workspace, slug="booking-bot")
    assert (agent.name, agent.priority, agent.max_priority) == ("Booking Bot", 300, 600)
    key = ApiKey.objects.get(agent=agent)
    assert key.prefix == lookup_prefix(raw)
    assert sorted(key.scopes) == ["bookings:write", "calendars:read"]
    assert raw not in key.key_hash
    assert raw not in err and key.prefix in err
    assert api_key_verify(raw).pk == key.pk
    # The printed key works over HTTP with exactly its scopes.
    with http_client(f"{live_server.url}/v1", headers={"Authorization": f"Bearer {raw}"}) as client:
        assert client.get("/calendars").status_code == 200
        assert client.post("/calendars", json={"name": "x"}).json()["required_scope"] == "calendars:write"


def test_it_reuses_an_existing_workspace_and_agent(db):
    first_out, _ = run("--workspace=initech", "--agent=bot", "--priority=100")
    second_out, _ = run("--workspace=initech", "--agent=bot", "--priority=200")

    assert Workspace.objects.filter(slug="initech").count() == 1
    agent = Agent.objects.get(slug="bot")
    assert agent.priority == 200 and agent.max_priority == 200
    assert ApiKey.objects.filter(agent=agent).count() == 2
    assert last_line(first_out) != last_line(second_out)


def test_the_default_scopes_are_all_scopes_but_overriding_the_calendar_rules(db):
    out, _ = run("--workspace=initech", "--agent=bot")
    key = ApiKey.objects.get(prefix=lookup_prefix(last_line(out)))
    assert sorted(key.scopes) == sorted(set(Scope.values) - {"bookings:override_rules"})


def test_it_rejects_unknown_scopes(db):
    with pytest.raises(CommandError, match="bookings:wirte"):
        run("--workspace=initech", "--agent=bot", "--scopes=bookings:read,bookings:wirte")
    assert not Workspace.objects.filter(slug="initech").exists()
    assert not ApiKey.objects.exists()


def test_it_rejects_max_priority_below_priority(db):
    with pytest.raises(CommandError, match="max-priority"):
        run("--workspace=initech", "--agent=bot", "--priority=500", "--max-priority=100")
    assert not Agent.objects.exists()


@pytest.mark.parametrize("priority", ["-1", "1001"])
def test_it_rejects_priorities_out_of_bounds(db, priority):
    with pytest.raises(CommandError, match="between"):
        run("--workspace=initech", "--agent=bot", f"--priority={priority}")
    assert not Agent.objects.exists()


def test_minting_another_key_without_priority_flags_keeps_the_agents_priorities(db):
    run("--workspace=initech", "--agent=exec", "--priority=500", "--max-priority=900")

    # A second key (e.g. a rotation) must not silently demote the agent to the default priority.
    run("--workspace=initech", "--agent=exec")

    agent = Agent.objects.get(slug="exec")
    assert (agent.priority, agent.max_priority) == (500, 900)
    assert ApiKey.objects.filter(agent=agent).count() == 2
