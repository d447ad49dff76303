"""The MCP server's approval tools as an MCP host uses them: the `agentcal-mcp` process over stdio, in front
of the real AgentCal (pytest-django's live server, real PostgreSQL)."""

from __future__ import annotations

from typing import Any

from mcp import Client

from tests.clients.helpers import content, stdio_agent
from tests.helpers import Persona, audit_rows, create_calendar, run_coroutine, slot


def test_an_agent_withdraws_its_approval_and_so_lets_the_gated_hold_go(
    sdr: Persona, live_server: Any
) -> None:
    calendar = create_calendar(sdr)["id"]
    process = stdio_agent(sdr.raw_key, live_server.url)

    async def session() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with Client(process) as client:
            held = content(
                await client.call_tool("hold_slot", {"calendar": calendar, **slot(), "ttl_seconds": 600})
            )["hold"]
            asked = content(
                await client.call_tool(
                    "request_approval", {"summary": "Book it", "evidence": {}, "hold_id": held["id"]}
                )
            )["approval"]
            release = {"hold_id": held["id"], "hold_token": held["hold_token"]}
            refused = content(await client.call_tool("release_hold", release))
            withdrawn = content(await client.call_tool("cancel_approval", {"approval_id": asked["id"]}))
            return held, refused, withdrawn

    held, refused, withdrawn = run_coroutine(session())

    # A gated hold is not the agent's to release: the tool that lets it go is named.
    assert refused["error"] == "hold_awaiting_approval" and "cancel_approval" in refused["next_step"]
    assert withdrawn["outcome"] == "cancelled" and withdrawn["approval"]["status"] == "cancelled"
    assert sdr.client.get(f"/holds/{held['id']}").json()["status"] == "released"
    assert len(audit_rows(event_type="approval.cancelled")) == 1
