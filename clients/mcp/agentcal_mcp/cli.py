"""`agentcal-mcp`: serve AgentCal's tools over stdio (the default) or streamable HTTP (`--http`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import get_args

from agentcal_mcp.gateway import Gateway
from agentcal_mcp.server import AgentCalMCP, LogLevel, http_app


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentcal-mcp",
        description="AgentCal's MCP server. Over stdio it acts as the agent whose key is AGENTCAL_API_KEY; "
        "over HTTP (--http) each request acts as the agent whose key it sends as `Authorization: Bearer …`.",
    )
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument(
        "--host", default="127.0.0.1", help="HTTP: the address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8765, help="HTTP: the port to listen on (default 8765)")
    parser.add_argument("--path", default="/mcp", help="HTTP: the MCP endpoint's path (default /mcp)")
    parser.add_argument(
        "--base-url",
        default=os.environ.get("AGENTCAL_BASE_URL"),
        help="AgentCal's URL (default: env AGENTCAL_BASE_URL, else http://localhost:8000)",
    )
    parser.add_argument("--log-level", default="WARNING", choices=get_args(LogLevel), help="to stderr")
    return parser


async def serve_stdio(gateway: Gateway, *, log_level: LogLevel) -> None:
    try:
        await AgentCalMCP(gateway, log_level=log_level).run_stdio_async()
    finally:
        await gateway.aclose()


async def serve_http(gateway: Gateway, *, host: str, port: int, path: str, log_level: LogLevel) -> None:
    import uvicorn

    app = http_app(gateway, host=host, path=path, log_level=log_level)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level.lower()))
    try:
        await server.serve()
    finally:
        await gateway.aclose()


# What a shell reports for a program stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    try:
        return _serve(_parser().parse_args(argv))
    except KeyboardInterrupt:
        # Ctrl-C is how a person stops the server: it has shut down cleanly by then (uvicorn and the
        # stdio loop close their sessions and the gateway first), so no traceback.
        return INTERRUPTED


def _serve(args: argparse.Namespace) -> int:
    if args.http:
        # No fallback key over HTTP: a request without its own key must act as nobody.
        gateway = Gateway(base_url=args.base_url, api_key=None)
        asyncio.run(
            serve_http(gateway, host=args.host, port=args.port, path=args.path, log_level=args.log_level)
        )
        return 0
    api_key = os.environ.get("AGENTCAL_API_KEY", "").strip()
    if not api_key:
        print("agentcal-mcp: set AGENTCAL_API_KEY to the agent's API key (avs_live_…)", file=sys.stderr)
        return 2
    asyncio.run(serve_stdio(Gateway(base_url=args.base_url, api_key=api_key), log_level=args.log_level))
    return 0
