"""Which scopes an API key carries, so a session lists only the tools its key can use: one `GET /v1/me`
(any valid key may ask), cached per key by the gateway."""

from __future__ import annotations

from agentcal_client import AsyncAgentCal

CALENDARS_READ = "calendars:read"
BOOKINGS_READ = "bookings:read"
BOOKINGS_WRITE = "bookings:write"
APPROVALS_READ = "approvals:read"
APPROVALS_WRITE = "approvals:write"
INBOX_READ = "inbox:read"
INBOX_SEND = "inbox:send"
AUDIT_READ = "audit:read"


async def discover_scopes(client: AsyncAgentCal) -> frozenset[str]:
    """The scopes the client's key carries. Raises what the call raised (`AuthenticationError` for a bad
    key, a connection error when AgentCal does not answer), so a failure is never mistaken for "no
    scopes"."""
    identity = await client.me()
    return frozenset(identity.key.scopes)
