"""A turn's MCP servers, connected and listed once, and the calls made on them.

``McpToolbox`` is entered by the task that runs the turn and left by it (the SDK's
transports hold anyio task groups), so sessions are opened one after another; listing
and calls then run concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import orjson

from agentic_api.mcp.catalog import GatewayTool, ToolCatalog
from agentic_api.mcp.client import (
    INVALID_ARGUMENTS,
    CallOutcome,
    ListedTool,
    McpConnection,
    McpLimits,
)
from agentic_api.mcp.hosts import check_server_url
from agentic_api.mcp.specs import McpServer
from agentic_api.wire.mcp import protocol_error


def check_hosts(
    servers: Sequence[McpServer], *, allowed_hosts: Sequence[str], allow_loopback: bool
) -> None:
    """Every server URL against the allow-list: a refused one fails the request (400)
    before anything is connected."""
    for server in servers:
        check_server_url(
            server.server_url,
            allowed_hosts=allowed_hosts,
            allow_loopback=allow_loopback,
            param=f"tools[{server.index}].server_url",
        )


class McpToolbox:
    def __init__(self, servers: Sequence[McpServer], limits: McpLimits) -> None:
        self.servers = list(servers)
        self.limits = limits
        self._connections: dict[str, McpConnection] = {}
        self.listings: list[tuple[McpServer, list[ListedTool]]] = []

    async def __aenter__(self) -> McpToolbox:
        try:
            for server in self.servers:
                connection = McpConnection(server, self.limits)
                await connection.open()
                self._connections[server.server_label] = connection
            listed = await asyncio.gather(*(c.list_tools() for c in self._connections.values()))
        except BaseException:
            await self.aclose()
            raise
        self.listings = [(s, tools) for s, tools in zip(self.servers, listed, strict=True)]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        # Last opened, first closed: each holds a task group nested in the previous one's.
        for connection in reversed(list(self._connections.values())):
            await connection.close()
        self._connections.clear()

    def catalog(self, client_tools: Sequence[dict[str, Any]] | None) -> ToolCatalog:
        return ToolCatalog(self.listings, client_tools)

    async def call(self, tool: GatewayTool, arguments: str) -> CallOutcome:
        """Runs ``tool`` with the model's JSON ``arguments``; bad JSON is the model's
        mistake, reported back to it as a failed call rather than sent to the server."""
        try:
            parsed = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            return CallOutcome(
                None,
                protocol_error(INVALID_ARGUMENTS, "The arguments are not a JSON object."),
            )
        return await self._connections[tool.server.server_label].call_tool(tool.tool.name, parsed)
