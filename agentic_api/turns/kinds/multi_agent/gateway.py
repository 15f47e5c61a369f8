"""The request's MCP tools in a multi-agent tree: every agent may call them.

The servers are connected and listed once for the whole tree, before the root's first
round (a refused host is a 400, an unreachable server a 424, as in the tool loop), and
their tools are shown to every agent's model as function tools (``<server_label>__<tool>``,
``mcp/catalog.py``) beside the client's own and the six actions. The client sees one
``mcp_list_tools`` item per server (the root's), and an ``mcp_call`` item for each call an
agent made, with that agent's name, streamed as the tool loop streams it (announced
``in_progress`` with its arguments before it runs, then completed or failed: ``shown.py``);
the agent's model sees its ``function_call`` and a ``function_call_output`` with the
result, as in the tool loop.

Approval: a tree does not pause for it (an agent cannot wait on a client over HTTP), so an
MCP tool that would need approval is refused (400) before anything runs, never run
unasked nor ignored: statically when ``require_approval`` is absent or ``always``
(``wire/multi_agent.py``), else once the servers are listed; an answer to an earlier
approval request in the input is refused the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.log import get_logger
from agentic_api.mcp.catalog import GatewayTool, ToolCatalog
from agentic_api.mcp.client import CallOutcome, McpLimits
from agentic_api.mcp.specs import is_mcp
from agentic_api.mcp.toolbox import McpToolbox
from agentic_api.turns.kinds.tool_loop import check_mcp_hosts, mcp_call_item
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.wire import mcp as wire
from agentic_api.wire.multi_agent import ROOT_AGENT, attributed
from lineage import IdKind, mint_id

log = get_logger("agentic_api.turns.multi_agent")


@dataclass(frozen=True)
class GatewayCall:
    """A call an agent's round made of an MCP tool; ``client_id`` its ``mcp_call`` item's
    id (derived from the model's call item's, as in the tool loop)."""

    tool: GatewayTool
    call: dict[str, Any]
    client_id: str

    @classmethod
    def of(cls, tool: GatewayTool, call: dict[str, Any]) -> GatewayCall:
        derived = wire.derived_id(str(call.get("id")), IdKind.MCP_CALL)
        return cls(tool, call, derived or mint_id(IdKind.MCP_CALL))

    @property
    def arguments(self) -> str:
        value = self.call.get("arguments")
        return value if isinstance(value, str) else ""

    def shown(
        self, agent_name: str, status: str, outcome: CallOutcome | None = None
    ) -> dict[str, Any]:
        """Its ``mcp_call`` item, attributed to ``agent_name``."""
        item = mcp_call_item(self.client_id, self.tool, self.arguments, status, outcome)
        return attributed(item, agent_name)


class TreeTools:
    def __init__(self, run: TurnInProgress, toolbox: McpToolbox, catalog: ToolCatalog) -> None:
        self.run, self.toolbox, self.catalog = run, toolbox, catalog

    def lookup(self, item: dict[str, Any]) -> GatewayCall | None:
        """``item`` as a call of an MCP tool, or None when it is not one."""
        if item.get("type") != "function_call":
            return None
        tool = self.catalog.lookup(str(item.get("name")))
        return None if tool is None else GatewayCall.of(tool, item)

    def listings(self) -> list[dict[str, Any]]:
        """One ``mcp_list_tools`` item per server, as the root's."""
        return [
            attributed(
                wire.list_tools_item(
                    mint_id(IdKind.MCP_LIST_TOOLS),
                    server.server_label,
                    [t.as_wire() for t in self.catalog.allowed[server.server_label]],
                ),
                ROOT_AGENT,
            )
            for server, _ in self.toolbox.listings
        ]

    async def run_calls(
        self, agent_name: str, calls: Sequence[GatewayCall]
    ) -> list[tuple[str, dict[str, Any]]]:
        """Runs ``calls`` together; for each, what its model is told and the ``mcp_call``
        item the client sees (attributed to ``agent_name``)."""
        if not calls:
            return []
        # Once a tool has run, the turn has happened: failures after that are stored.
        self.run.worked = True
        outcomes = await asyncio.gather(*(self.toolbox.call(c.tool, c.arguments) for c in calls))
        results: list[tuple[str, dict[str, Any]]] = []
        for call, outcome in zip(calls, outcomes, strict=True):
            log.info(
                "mcp call",
                response_id=self.run.turn.response_id,
                agent=agent_name,
                server_label=call.tool.server.server_label,
                tool=call.tool.tool.name,
                failed=outcome.failed,
                seconds=round(outcome.seconds, 3),
            )
            results.append((outcome.model_text(), call.shown(agent_name, outcome.status, outcome)))
        return results


async def open_tree_tools(run: TurnInProgress) -> TreeTools | None:
    """The request's MCP servers connected and listed (held until the turn has ended),
    or None when it has none. Raises the request's refusals, before anything runs (an
    approval response in a tree's input is refused earlier, as the turn is prepared)."""
    turn, settings = run.turn, run.services.settings
    if not turn.mcp_servers:
        return None
    check_mcp_hosts(turn, settings)
    # The sessions stay open until the turn has ended (turns/run.py closes them).
    toolbox = await run.held.enter_async_context(
        McpToolbox(turn.mcp_servers, McpLimits.from_settings(settings))
    )
    catalog = toolbox.catalog([t for t in turn.request.tools or () if not is_mcp(t)])
    for server, _ in toolbox.listings:
        for tool in catalog.allowed[server.server_label]:
            if server.approval.requires_approval(tool.name, tool.read_only):
                raise InvalidRequest(
                    f"MCP tool '{tool.name}' of server '{server.server_label}' needs approval, "
                    "which a multi-agent response cannot wait for on this server; set "
                    "require_approval so that none of its allowed tools needs it (such as "
                    "'never'), or leave the tool out with allowed_tools.",
                    param=f"tools[{server.index}].require_approval",
                    code="unsupported_parameter",
                )
    return TreeTools(run, toolbox, catalog)
