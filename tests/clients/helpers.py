"""Helpers for the client tests: clients for a persona, a proxy that loses responses, the MCP tool sets."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from agentcal_client import AsyncAgentCal
from mcp import StdioServerParameters
from mcp.types import CallToolResult

from tests.helpers import _tls_context

# What agentcal-mcp offers a session: every tool to a key with every scope, only these to a read-only key.
READ_TOOLS = {
    "list_calendars",
    "find_free_slots",
    "find_meeting_time",
    "get_booking",
    "list_bookings",
    "get_approval",
    "list_inbox_messages",
    "read_message",
    "query_audit",
}
WRITE_TOOLS = {
    "hold_meeting",
    "hold_slot",
    "extend_hold",
    "release_hold",
    "commit_booking",
    "reschedule_booking",
    "reschedule_to_earliest",
    "cancel_booking",
    "request_approval",
    "cancel_approval",
    "reply_to_message",
    "send_invite",
}
READ_ONLY_SCOPES = ["calendars:read", "bookings:read", "approvals:read", "inbox:read", "audit:read"]


def async_agentcal(base_url: str, raw_key: str, **options: Any) -> AsyncAgentCal:
    transport = httpx.AsyncClient(verify=_tls_context(), headers={"Connection": "close"}, timeout=30)
    return AsyncAgentCal(raw_key, base_url=base_url, http_client=transport, **options)


@dataclass
class Seen:
    """One request as it reached the proxy, and the server's answer when it was forwarded."""

    at: float
    method: str
    path: str
    headers: dict[str, str]
    upstream_status: int | None = None
    upstream_headers: dict[str, str] = field(default_factory=dict)
    upstream_body: bytes = b""


# What the proxy does with the n-th request (0-based): forward it and pass the answer on with the plan's
# headers added ("forward"), forward it and answer this instead ("lose": the server did the work, the
# client never hears), or answer this without forwarding ("refuse").
Plan = Callable[[int, str], tuple[str, int, dict[str, str], bytes]]


@dataclass
class FaultyProxy:
    url: str
    seen: list[Seen]


def problem(status: int, code: str, **extra: Any) -> bytes:
    """A problem+json body as the server writes one."""
    return json.dumps(
        {"type": "about:blank", "title": code, "status": status, "detail": code, "error": code, **extra}
    ).encode()


def forward_everything(index: int, method: str) -> tuple[str, int, dict[str, str], bytes]:
    return ("forward", 0, {}, b"")


WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def every_day(opens: str, closes: str) -> dict[str, list[list[str]]]:
    """Working hours open from `opens` to `closes` (local clock) on all seven days, so a test does not
    depend on which weekday it runs."""
    return {day: [[opens, closes]] for day in WEEKDAYS}


def utc_midnight(days_ahead: int) -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=days_ahead)


def stdio_agent(raw_key: str, base_url: str) -> StdioServerParameters:
    """`agentcal-mcp` over stdio for an agent with this key, against the server at `base_url`."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentcal_mcp"],
        env={
            "AGENTCAL_API_KEY": raw_key,
            "AGENTCAL_BASE_URL": base_url,
            # The server process runs the code under test, wherever the test run imports it from.
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
        },
    )


def content(result: CallToolResult) -> dict[str, Any]:
    """A tool's structured answer."""
    assert result.structured_content is not None, result.content
    return result.structured_content
