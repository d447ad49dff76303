"""An agent's request leaves no reference cycles behind: once the server has sent the answer and closed
it, as every WSGI server must, all of the request's objects are freed by reference counting. Objects in
a cycle wait for Python's cyclic collector instead, which then runs every few requests and took ~3 % of
the request path's CPU (docs/performance-notes.md, "Reference cycles"). Every kind of answer an agent
commonly gets is checked: a write, a read, and each refusal."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentcal import broker
from agentcal.wsgi import application
from bench.request_cpu import agent_request
from tests.helpers import cyclic_garbage, slot
from workspaces.keys import api_key_create, verified_keys
from workspaces.models import Agent, Workspace


def served(method: str, path: str, *, key: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    """agentcal.wsgi's answer to one request, read and closed as a WSGI server does."""
    data = b"" if body is None else json.dumps(body).encode()
    status, content = agent_request(application, method, path, key=key, body=data)
    return status, json.loads(content) if content else {}


@pytest.fixture
def agent_key(transactional_db: None) -> Iterator[Callable[..., str]]:
    def make(**limits: Any) -> str:
        workspace, _ = Workspace.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
        name = f"agent-{Agent.objects.count()}"
        agent = Agent.objects.create(workspace=workspace, name=name, slug=name, priority=100, **limits)
        _, raw = api_key_create(agent=agent, scopes=["calendars:write", "bookings:read", "bookings:write"])
        return raw

    yield make
    verified_keys.clear()


def test_a_write_a_read_and_every_common_refusal_leave_no_cycles(
    agent_key: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writes' nudges are queued for this process's publisher thread as always, which sends nothing
    # here: its broker connection's objects are not the request's.
    monkeypatch.setattr(broker._Publisher, "_send_nudges", lambda self, nudges: None)
    key = agent_key()
    status, calendar = served("POST", "/calendars", key=key, body={"name": "Sales"})
    assert status == 201, calendar
    holds = f"/calendars/{calendar['id']}/holds"
    hours = iter(range(30, 1000, 2))

    def hold_and_commit() -> tuple[int, dict[str, Any]]:
        status, hold = served("POST", holds, key=key, body=slot(hours_ahead=next(hours)))
        assert status == 201, hold
        commits = f"/calendars/{calendar['id']}/commits"
        return served("POST", commits, key=key, body={"hold_token": hold["hold_token"]})

    taken = slot(hours_ahead=10)
    assert served("POST", holds, key=key, body=taken)[0] == 201
    paused = agent_key(paused_at="2026-01-01T00:00:00Z", paused_by="olivia@acme.test")
    flooding = agent_key(limit_requests_per_second=0.001, limit_request_burst=1)
    requests: dict[str, tuple[int, Callable[[], tuple[int, dict[str, Any]]]]] = {
        "a hold and its commit": (201, hold_and_commit),
        "the agent's own key read": (200, lambda: served("GET", "/me", key=key)),
        "a hold on a span already held": (409, lambda: served("POST", holds, key=key, body=taken)),
        "an unknown calendar": (
            404,
            lambda: served("POST", "/calendars/cal_0000000000/holds", key=key, body=taken),
        ),
        "a body that is not a span": (400, lambda: served("POST", holds, key=key, body={"start_time": 3})),
        "an unknown path": (404, lambda: served("GET", "/nowhere", key=key)),
        "a method the endpoint lacks": (405, lambda: served("DELETE", "/me", key=key)),
        "an unknown key": (401, lambda: served("GET", "/me", key="ak_live_unknown")),
        "a paused agent's write": (423, lambda: served("POST", "/calendars", key=paused, body={"name": "x"})),
        "an agent over its request rate": (429, lambda: served("GET", "/me", key=flooding)),
    }
    left: dict[str, Counter[str]] = {}
    for name, (expected, request) in requests.items():
        request()  # once first: caches fill, a bucket empties
        (status, _), found = cyclic_garbage(request)
        assert status == expected, (name, status)
        if found:
            left[name] = found
    assert not left, {name: dict(found.most_common(8)) for name, found in left.items()}
