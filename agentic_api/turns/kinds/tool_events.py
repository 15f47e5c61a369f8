"""The client's view of a streamed round in which the model calls gateway-run tools.

The upstream streams a ``function_call`` like any other; for a tool the gateway runs,
the client is shown OpenAI's MCP events instead: ``output_item.added`` with an
``mcp_call`` item, ``mcp_call.in_progress``, ``mcp_call_arguments.delta``/``.done``.
The call's ``output_item.done`` waits until the gateway has run it (``tool_loop``). A
call that needs approval is not shown while it streams: once the round ends it becomes
an ``mcp_approval_request`` item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentic_api.mcp.catalog import GatewayTool, ToolCatalog
from agentic_api.wire import mcp as wire
from lineage import IdKind


@dataclass
class StreamedCall:
    tool: GatewayTool
    client_id: str
    arguments: str = ""


class GatewayEvents:
    """Rewrites one round's translated events (our ids, our output indices)."""

    def __init__(self, catalog: ToolCatalog) -> None:
        self.catalog = catalog
        # Gateway calls seen in this round, by output index; None: held for approval.
        self.calls: dict[int, StreamedCall | None] = {}

    def start_round(self) -> None:
        self.calls = {}

    def convert(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        index = event.get("output_index")
        item = event.get("item")
        if (
            kind == "response.output_item.added"
            and isinstance(index, int)
            and isinstance(item, dict)
            and item.get("type") == "function_call"
            and (tool := self.catalog.lookup(str(item.get("name")))) is not None
        ):
            return self._added(index, tool, item)
        if not isinstance(index, int) or index not in self.calls:
            return [event]
        call = self.calls[index]
        if call is None:
            return []
        if kind == "response.function_call_arguments.delta":
            delta = str(event.get("delta", ""))
            call.arguments += delta
            return [wire.arguments_delta(index, call.client_id, delta)]
        if kind == "response.function_call_arguments.done":
            call.arguments = str(event.get("arguments", call.arguments))
            return [wire.arguments_done(index, call.client_id, call.arguments)]
        # The function call's own output_item.done: the mcp_call's comes after it ran.
        return []

    def announced(self, index: int) -> bool:
        return self.calls.get(index) is not None

    def _added(self, index: int, tool: GatewayTool, item: dict[str, Any]) -> list[dict[str, Any]]:
        if tool.requires_approval:
            self.calls[index] = None
            return []
        client_id = wire.derived_id(str(item.get("id")), IdKind.MCP_CALL) or str(item.get("id"))
        self.calls[index] = StreamedCall(tool, client_id)
        placeholder = wire.call_item(
            client_id,
            server_label=tool.server.server_label,
            name=tool.tool.name,
            arguments="",
            status="in_progress",
        )
        return [
            wire.item_added(index, placeholder),
            wire.progress_event("mcp_call.in_progress", index, client_id),
        ]
