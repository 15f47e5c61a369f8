"""MCP tools as the model sees them: plain function tools named ``<server_label>__<tool>``.

The model server knows nothing of MCP; it gets function tools. The namespacing keeps
two servers' ``search`` (or a server's tool and a client's function) apart, and the
catalog maps a called name back to its server and tool. Conversion is deterministic
(same listing, same bytes), so an unchanged server keeps the upstream prompt prefix
identical from turn to turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.mcp.client import ListedTool
from agentic_api.mcp.specs import McpServer, is_mcp

SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class GatewayTool:
    """A tool the gateway runs: the name the model calls it by, where it lives."""

    function_name: str
    server: McpServer
    tool: ListedTool

    @property
    def requires_approval(self) -> bool:
        return self.server.approval.requires_approval(self.tool.name, self.tool.read_only)


def function_name(server_label: str, tool_name: str) -> str:
    # Function names are [A-Za-z0-9_-] for most model servers and templates; MCP tool
    # names may also hold dots and more.
    return f"{server_label}{SEPARATOR}{_UNSAFE.sub('_', tool_name)}"


def function_tool(name: str, tool: ListedTool) -> dict[str, Any]:
    value: dict[str, Any] = {"type": "function", "name": name}
    if tool.description:
        value["description"] = tool.description
    value["parameters"] = tool.input_schema
    return value


class ToolCatalog:
    """The turn's MCP tools (each server listed once, filtered by ``allowed_tools``)."""

    def __init__(
        self,
        listings: Sequence[tuple[McpServer, Sequence[ListedTool]]],
        client_tools: Sequence[dict[str, Any]] | None,
    ) -> None:
        taken = {
            tool["name"]
            for tool in client_tools or ()
            if tool.get("type") == "function" and isinstance(tool.get("name"), str)
        }
        self.allowed: dict[str, list[ListedTool]] = {}
        self._by_function: dict[str, GatewayTool] = {}
        self._by_server: dict[str, list[GatewayTool]] = {}
        for server, listed in listings:
            allowed = [t for t in listed if server.allows(t.name, t.read_only)]
            self.allowed[server.server_label] = allowed
            tools: list[GatewayTool] = []
            for tool in allowed:
                name = function_name(server.server_label, tool.name)
                if name in taken or name in self._by_function:
                    raise InvalidRequest(
                        f"MCP tool '{tool.name}' of server '{server.server_label}' would be "
                        f"presented to the model as '{name}', which another tool already "
                        "uses; change the server_label or the function's name.",
                        param=f"tools[{server.index}].server_label",
                        code="tool_name_conflict",
                    )
                gateway = GatewayTool(name, server, tool)
                self._by_function[name] = gateway
                tools.append(gateway)
            self._by_server[server.server_label] = tools

    def lookup(self, function: str) -> GatewayTool | None:
        return self._by_function.get(function)

    def upstream_tools(self, tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The request's tools as sent upstream: each MCP entry replaced, in place, by
        its server's function tools; every other tool as the client sent it."""
        result: list[dict[str, Any]] = []
        for tool in tools:
            if not is_mcp(tool):
                result.append(tool)
                continue
            for gateway in self._by_server.get(str(tool.get("server_label")), ()):
                result.append(function_tool(gateway.function_name, gateway.tool))
        return result

    def upstream_tool_choice(self, choice: Any) -> Any:
        """``tool_choice: {type: mcp, server_label, name?}`` in function terms."""
        if not isinstance(choice, dict) or choice.get("type") != "mcp":
            return choice
        label, name = choice.get("server_label"), choice.get("name")
        if isinstance(label, str) and isinstance(name, str):
            return {"type": "function", "name": function_name(label, name)}
        # A server without a tool name: some tool must be called; that is the closest
        # a plain function-calling model server can express.
        return "required"
