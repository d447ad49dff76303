"""`manage.py create_agent_key`: bootstrap a workspace, agent and key; print the raw key alone, last."""

from __future__ import annotations

import re
import shlex
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import resolve

from tests.helpers import http_client
from workspaces.keys import api_key_verify, lookup_prefix
from workspaces.models import ELEVATED_SCOPES, Agent, ApiKey, Scope, Workspace


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


README = Path(__file__).resolve().parents[2] / "README.md"
# Where the README's examples call the API: `$API/calendars/$CAL/holds` in its shell blocks, and
# `POST /v1/approvals` or `GET /v1/approvals/{id}` in its prose.
API_CALL = re.compile(r"\$API(/[^\s\"'?)]*)|\b(?:GET|POST|PATCH|PUT|DELETE) /v1(/[^\s`?)]*)")


def quickstart_command() -> list[str]:
    """The README Quickstart's `create_agent_key` command line, as the reader runs it."""
    quickstart = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    (command,) = re.findall(
        r"^python3 dev\.py manage create_agent_key(?:[^\n]*\\\n)*[^\n]*$", quickstart, re.M
    )
    arguments = shlex.split(command.replace("\\\n", " "))
    return arguments[arguments.index("create_agent_key") + 1 :]


def scopes_the_readme_uses() -> set[str]:
    """Every scope that an API operation the README's examples call requires (with any method)."""
    scopes: set[str] = set()
    for found in API_CALL.finditer(README.read_text()):
        path = found.group(1) or found.group(2)
        path = re.sub(r"\$\{?\w+\}?|\{\w+\}", "x", path)
        match = resolve(f"/v1{path}")
        scopes |= set(getattr(match.func, "view_class", object).__dict__.get("required_scopes", {}).values())
    return scopes & set(Scope.values)  # not ANY_SCOPE, which every key has


def test_the_readme_quickstart_key_may_call_everything_the_readme_walks_through(
    transactional_db, live_server
):
    needed = scopes_the_readme_uses()
    # Not vacuous: the walk-throughs go past calendars and bookings, into what a narrow key lacked.
    assert {"approvals:write", "approvals:read", "inbox:read", "inbox:send", "webhooks:write"} <= needed

    out, _ = run(*quickstart_command())

    key = ApiKey.objects.get(prefix=lookup_prefix(last_line(out)))
    assert needed - set(ELEVATED_SCOPES) <= set(key.scopes)
    assert not set(ELEVATED_SCOPES) & set(key.scopes)  # overriding calendar rules stays opt-in
    with http_client(
        f"{live_server.url}/v1", headers={"Authorization": f"Bearer {last_line(out)}"}
    ) as client:
        approval = client.post(
            "/approvals", json={"summary": "Book the intro call", "evidence": {"why": "asked"}}
        )
        assert approval.status_code == 201, approval.text
        for path in (
            f"/approvals/{approval.json()['id']}",
            "/inbox",
            "/inbox/threads",
            "/webhook-endpoints",
            "/audit",
        ):
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
