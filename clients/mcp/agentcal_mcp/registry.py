"""How a tool is declared: registered with its scope and hints, and run so that AgentCal's errors become
results the model can act on (a problem's code and the next step), never an exception string."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from agentcal_client import AgentCalError, AsyncAgentCal
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ValidationError

from agentcal_mcp.gateway import Gateway, MissingKey
from agentcal_mcp.results import ToolResult, api_error_result, as_call_result, error_result

P = ParamSpec("P")
R = TypeVar("R", bound=ToolResult)


@dataclass(frozen=True)
class AgentTool:
    name: str
    fn: Callable[..., Awaitable[CallToolResult]]
    title: str
    description: str
    scope: str
    annotations: ToolAnnotations


class InvalidArguments(Exception):
    """Arguments the input schema cannot rule out alone (e.g. two alternative forms mixed)."""


class Explained(Exception):
    """An AgentCal error whose usual next step would mislead in this tool's context."""

    def __init__(self, error: AgentCalError, next_step: str) -> None:
        super().__init__(str(error))
        self.error = error
        self.next_step = next_step


class GatewayHolder:
    """Implemented by the server: how a tool finds the gateway of the server it runs in."""

    gateway: Gateway


def agentcal(ctx: Context) -> AsyncAgentCal:
    """The AgentCal client acting as this request's agent."""
    server = ctx.mcp_server
    assert isinstance(server, GatewayHolder), "tools run only inside agentcal_mcp's server"
    return server.gateway.client_for(server.gateway.key_for(ctx.headers))


class ToolRegistry:
    """The tools of one server, in the order they were declared (the order a session lists them)."""

    def __init__(self) -> None:
        self.tools: list[AgentTool] = []

    def tool(
        self,
        *,
        scope: str,
        title: str,
        read_only: bool = False,
        destructive: bool = False,
        idempotent: bool = False,
    ) -> Callable[
        [Callable[Concatenate[Context, P], Awaitable[R]]], Callable[Concatenate[Context, P], Awaitable[R]]
    ]:
        """Register a tool. Its docstring is the description the model reads; `scope` is the API scope it
        needs (a session whose key lacks it does not list it). Errors from AgentCal become error results
        with the problem's code and what to do; a conflict is the tool's own business (an ordinary result).
        """

        def register(
            fn: Callable[Concatenate[Context, P], Awaitable[R]],
        ) -> Callable[Concatenate[Context, P], Awaitable[R]]:
            @functools.wraps(fn)
            async def call(ctx: Context, *args: P.args, **kwargs: P.kwargs) -> CallToolResult:
                try:
                    result = await fn(ctx, *args, **kwargs)
                except (InvalidArguments, ValueError) as invalid:
                    if isinstance(invalid, ValidationError):
                        raise  # a result this server failed to build: its bug, not the caller's arguments
                    # ValueError: the client refusing arguments before sending them (e.g. an empty search).
                    return error_result(
                        code="invalid_request",
                        detail=str(invalid),
                        next_step="Fix the arguments and call again.",
                    )
                except MissingKey as missing:
                    return error_result(
                        code="unauthenticated",
                        detail=str(missing),
                        next_step="Stop: this MCP server has no API key for you. A human must configure one.",
                    )
                except Explained as explained:
                    return api_error_result(explained.error, next_step=explained.next_step)
                except AgentCalError as error:
                    return api_error_result(error)
                return as_call_result(result)

            self.tools.append(
                AgentTool(
                    name=fn.__name__,
                    fn=call,
                    title=title,
                    description=inspect.cleandoc(fn.__doc__ or ""),
                    scope=scope,
                    annotations=ToolAnnotations(
                        title=title,
                        read_only_hint=read_only,
                        destructive_hint=None if read_only else destructive,
                        idempotent_hint=idempotent,
                        open_world_hint=False,
                    ),
                )
            )
            return fn

        return register


async def take(items: AsyncIterator[Any], limit: int) -> tuple[list[Any], bool]:
    """Up to `limit` items, and whether there were more (ask for pages of `limit + 1`: one request)."""
    taken: list[Any] = []
    async for item in items:
        if len(taken) == limit:
            return taken, True
        taken.append(item)
    return taken, False


# Every tool of the server, in the order the tool modules declare them (agentcal_mcp.tools imports
# agentcal_mcp.finding first, so finding time comes first).
REGISTRY = ToolRegistry()
