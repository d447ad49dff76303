"""`agentcal-mcp` as a host on another SDK sees it: the official TypeScript MCP SDK (pinned in
tests/clients/mcp_typescript/package.json) starts the `agentcal-mcp` command over stdio in front of the live
server, negotiates the newest protocol version that SDK knows, is offered a lean tool list, and gets arguments
that do not fit answered as a structured result it can act on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Persona, create_calendar
from tests.node import npm_ci, require_node

HOST = Path(__file__).resolve().parent / "mcp_typescript"
# What a host puts before the model on every turn is each tool's name, description and input schema: that is
# context the agent pays for. Measured when this was written (json.dumps sizes, a key with every scope):
# 20 tools, 5,584 characters of descriptions and 15,955 of input schemas (about 5,400 tokens together). The
# budgets leave room for a tool or two more without letting the list grow unnoticed. (The output schemas,
# 70,641 characters, are for the host's validation of structured results, not shown to the model.)
TOOLS_BUDGET = 22
DESCRIPTIONS_BUDGET_CHARACTERS = 6_500
MODEL_VISIBLE_BUDGET_CHARACTERS = 24_000


def agentcal_mcp_command() -> str:
    """The `agentcal-mcp` console script installed beside the running python (as `pip install -e clients/mcp`
    gives it)."""
    command = Path(sys.executable).parent / "agentcal-mcp"
    if not command.exists():
        pytest.skip(f"the agentcal-mcp command is not installed beside {sys.executable}")
    return str(command)


def run_host(persona: Persona, base_url: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    node, _ = require_node()
    npm_ci(HOST)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "AGENTCAL_API_KEY": persona.raw_key,
        "AGENTCAL_BASE_URL": base_url,
        "MCP_CALLS": json.dumps(calls),
        # The command runs the code under test, wherever this test run imports it from.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    done = subprocess.run(
        [node, str(HOST / "host.mjs"), agentcal_mcp_command()],
        cwd=HOST,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def structured(result: dict[str, Any]) -> dict[str, Any]:
    """The result's structured content, and the same document as its JSON text (hosts that read only the
    text see everything too)."""
    content: dict[str, Any] = result["structuredContent"]
    (text,) = [part["text"] for part in result["content"] if part["type"] == "text"]
    assert json.loads(text) == content
    return content


@pytest.mark.django_db(transaction=True)
def test_the_typescript_sdk_negotiates_the_newest_protocol_lists_lean_tools_and_gets_structured_refusals(
    sdr: Persona, live_server: Any
) -> None:
    calendar = create_calendar(sdr, name="Ana")["id"]

    seen = run_host(
        sdr,
        live_server.url,
        [
            {"name": "hold_slot", "arguments": {"calendar": 42, "start_time": "soon"}},
            {"name": "list_calendars", "arguments": {}},
        ],
    )

    assert seen["negotiatedProtocolVersion"] == seen["sdkLatestProtocolVersion"] == "2025-11-25"
    tools = seen["tools"]
    descriptions = sum(len(tool["description"]) for tool in tools)
    model_visible = descriptions + sum(len(json.dumps(tool["inputSchema"])) for tool in tools)
    assert len(tools) <= TOOLS_BUDGET, [tool["name"] for tool in tools]
    assert descriptions <= DESCRIPTIONS_BUDGET_CHARACTERS, descriptions
    assert model_visible <= MODEL_VISIBLE_BUDGET_CHARACTERS, model_visible
    assert all(tool["inputSchema"]["type"] == "object" and tool["description"] for tool in tools)

    invalid, listed = seen["results"]
    refused = structured(invalid)
    assert invalid["isError"] is True
    assert (refused["outcome"], refused["error"]) == ("error", "invalid_request"), refused
    assert {"calendar", "start_time", "end_time"} <= set(refused["errors"]), refused["errors"]
    assert "hold_slot" in refused["next_step"] and "calendar" in refused["next_step"]
    assert "soon" not in json.dumps(refused), "the caller's values are not echoed"

    assert not listed.get("isError")
    calendars = structured(listed)
    assert [(item["id"], item["name"]) for item in calendars["calendars"]] == [(calendar, "Ana")], calendars
    assert calendars["next_step"]
