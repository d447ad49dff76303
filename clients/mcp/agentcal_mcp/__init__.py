"""agentcal-mcp: an MCP server through which any MCP host books calendars with AgentCal."""

from __future__ import annotations

__version__ = "0.1.0"
