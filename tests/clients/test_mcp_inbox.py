"""The MCP server's inbox tools as an MCP host uses them: the `agentcal-mcp` process over stdio, in front of
the real AgentCal (pytest-django's live server, real PostgreSQL), reading mail stored as the listener does."""

from __future__ import annotations

from typing import Any

from mcp import Client

from tests.clients.helpers import content, stdio_agent
from tests.helpers import Persona, run_coroutine
from tests.inboxes.helpers import address_of, deliver_raw, mail


def test_list_inbox_messages_says_its_order_and_how_to_read_on(sdr: Persona, live_server: Any) -> None:
    for subject in ("First", "Second", "Third"):
        deliver_raw(mail(address_of(sdr), subject=subject).as_bytes(), [address_of(sdr)])
    process = stdio_agent(sdr.raw_key, live_server.url)

    async def session() -> tuple[str, dict[str, Any], dict[str, Any]]:
        async with Client(process) as client:
            (tool,) = [t for t in (await client.list_tools()).tools if t.name == "list_inbox_messages"]
            first = content(await client.call_tool("list_inbox_messages", {"limit": 2}))
            since = first["messages"][-1]["received_at"]
            rest = content(await client.call_tool("list_inbox_messages", {"limit": 2, "since": since}))
            return tool.description or "", first, rest

    description, first, rest = run_coroutine(session())

    # What the tool says of its order is what it does: the API lists a poller's mail oldest first.
    assert "oldest first" in description and "newest first" not in description
    assert [m["subject"] for m in first["messages"]] == ["First", "Second"] and first["more"] is True
    assert "since" in first["next_step"], first["next_step"]
    assert [m["subject"] for m in rest["messages"]] == ["Second", "Third"] and rest["more"] is False
