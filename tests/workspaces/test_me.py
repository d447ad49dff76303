"""`GET /v1/me`: any valid key learns who it is and what it may do, with no scope needed."""

from __future__ import annotations

import httpx


def test_a_key_learns_its_agent_workspace_and_scopes_without_any_scope(make_agent):
    reader = make_agent("reader", priority=150, max_priority=400, scopes=["bookings:read"])
    response = reader.client.get("/me")
    assert response.status_code == 200, response.text
    me = response.json()
    assert me["agent"] == {
        "id": reader.agent.public_id,
        "name": "reader",
        "slug": "reader",
        "priority": 150,
        "max_priority": 400,
    }
    assert me["workspace"]["slug"] == "acme" and me["workspace"]["id"].startswith("ws_")
    assert me["key"]["scopes"] == ["bookings:read"]
    assert me["key"]["prefix"] and me["key"]["expires_at"] is None

    nothing = make_agent("nothing", scopes=[])
    assert nothing.client.get("/me").json()["key"]["scopes"] == []


def test_without_a_valid_key_it_is_401(live_server):
    response = httpx.get(f"{live_server.url}/v1/me", headers={"Authorization": "Bearer avs_live_nope"})
    assert response.status_code == 401
