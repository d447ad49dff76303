"""Which agent a request acts as: the key of a stdio session, or the bearer key of each HTTP request.

Over stdio one process serves one agent, whose key comes from AGENTCAL_API_KEY. Over HTTP every request
carries its own `Authorization: Bearer avs_live_…`, which is passed on to AgentCal unchanged, so each
MCP session acts as the agent whose key it sent; there is no fallback key, so a request without one
acts as nobody. Clients and scopes are kept per key (by digest, never the key itself as a dict key of
long-lived state), so a busy HTTP server does not re-discover scopes on every call.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping

import httpx
from agentcal_client import AsyncAgentCal

from agentcal_mcp.scopes import discover_scopes

# How long a key's discovered scopes are trusted. A key's scopes never change (rotation makes a new key),
# and AgentCal checks the key on every call anyway (a revoked key's calls get `unauthenticated` at once);
# rediscovering (one GET /v1/me) only bounds how long a revoked key still passes the HTTP door and lists
# tools.
SCOPES_TTL_SECONDS = 60.0
# Keys remembered at once (HTTP): each costs one small client object and a set of scopes.
MAX_KEYS = 256


class MissingKey(Exception):
    """No API key for this request: none configured (stdio) or none sent (HTTP)."""


def bearer_key(headers: Mapping[str, str]) -> str | None:
    scheme, _, raw = headers.get("authorization", "").partition(" ")
    raw = raw.strip()
    return raw if scheme.lower() == "bearer" and raw else None


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Gateway:
    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float = 10.0,
        max_retries: int = 3,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """`http_client`: bring your own (proxies, TLS settings); it is closed with the gateway."""
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        # One connection pool for every key's client; each client sends its own key per request.
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._clients: OrderedDict[str, AsyncAgentCal] = OrderedDict()
        self._scopes: OrderedDict[str, tuple[float, asyncio.Task[frozenset[str]]]] = OrderedDict()

    def key_for(self, headers: Mapping[str, str] | None) -> str:
        """`headers` are the HTTP request's (None over stdio)."""
        if headers is None:
            if not self.api_key:
                raise MissingKey("Set AGENTCAL_API_KEY to the agent's API key (avs_live_…).")
            return self.api_key
        key = bearer_key(headers)
        if key is None:
            raise MissingKey("Send the agent's API key as `Authorization: Bearer avs_live_…`.")
        return key

    def client_for(self, key: str) -> AsyncAgentCal:
        digest = _digest(key)
        client = self._clients.get(digest)
        if client is None:
            client = AsyncAgentCal(
                key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries,
                http_client=self._http,
            )
            self._clients[digest] = client
            if len(self._clients) > MAX_KEYS:
                self._clients.popitem(last=False)  # nothing to close: the connection pool is shared
        self._clients.move_to_end(digest)
        return client

    async def scopes_for(self, key: str) -> frozenset[str]:
        """The key's scopes, discovered once per SCOPES_TTL_SECONDS; concurrent first calls share one
        discovery. A failed discovery is not remembered, so the next call tries again."""
        digest = _digest(key)
        cached = self._scopes.get(digest)
        if cached is None or time.monotonic() - cached[0] > SCOPES_TTL_SECONDS:
            task = asyncio.ensure_future(discover_scopes(self.client_for(key)))
            cached = (time.monotonic(), task)
            self._scopes[digest] = cached
            if len(self._scopes) > MAX_KEYS:
                self._scopes.popitem(last=False)
        self._scopes.move_to_end(digest)
        try:
            return await asyncio.shield(cached[1])
        except Exception:
            # The discovery failed (a cancelled caller is a BaseException and lands elsewhere).
            if self._scopes.get(digest) is cached:
                del self._scopes[digest]
            raise

    async def aclose(self) -> None:
        await self._http.aclose()
