"""Disabling an agent in the dashboard refuses its keys at the API, over real HTTP, until it is enabled again;
other agents' keys keep working throughout."""

from __future__ import annotations

import time

from accounts.models import Membership, Role
from tests.dashboard.pages_helpers import signed_in


def status_soon(persona, expected: int) -> int:
    """The API's answer to the persona's key, waiting up to two seconds for it to become `expected`
    (every process drops its copy of a changed key row within a second: workspaces/keys.py)."""
    deadline = time.monotonic() + 2
    while True:
        status = persona.client.get("/me").status_code
        if status == expected or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def test_a_disabled_agents_keys_are_refused_until_it_is_enabled(sdr, exec_assistant, django_user_model):
    owner = django_user_model.objects.create_user(username="olivia@acme.test", email="olivia@acme.test")
    Membership.objects.create(user=owner, workspace=sdr.agent.workspace, role=Role.OWNER)
    dashboard = signed_in(owner)
    agent_page = f"/w/acme/agents/{sdr.id}"
    assert sdr.client.get("/me").status_code == 200  # verified, and its row copied in this process

    assert dashboard.post(f"{agent_page}/disable").status_code == 302

    assert status_soon(sdr, 401) == 401
    refused = sdr.client.get("/calendars")
    assert refused.status_code == 401 and refused.headers["content-type"] == "application/problem+json"
    assert exec_assistant.client.get("/me").status_code == 200

    assert dashboard.post(f"{agent_page}/enable").status_code == 302

    assert status_soon(sdr, 200) == 200
