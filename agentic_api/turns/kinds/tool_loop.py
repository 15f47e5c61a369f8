"""A turn in which the gateway runs MCP tools: several upstream rounds, one commit.

1. Every MCP server of the request is checked against the host allow-list, connected,
   and listed once (``mcp/``); the client is shown one ``mcp_list_tools`` item per
   server, the model their tools as function tools (``<server_label>__<tool>``) next to
   the client's own, in the request's ``tools``; the ``mcp`` entries themselves never
   go upstream. A refused host (400), an unreachable server (424) or an upstream that
   refuses round 1 fails the request before anything is shown or stored.
2. Approval answers in the input (``mcp_approval_response``) are settled first: an
   approved call runs, a denied one is reported to the model as denied.
3. Each round sends the model everything so far. When it calls gateway tools, they run
   (concurrently, each bounded), and the next round follows; when it answers without
   them, calls a client's function (the turn ends and the client answers it, after the
   gateway's calls of that round ran), or needs approval (the turn ends with
   ``mcp_approval_request`` items), the turn ends. ``max_tool_calls`` and the server's
   ``max_tool_rounds`` bound the loop: past them, calls are not run (the client sees
   them as ``incomplete`` mcp_call items) and the turn ends ``completed``, as OpenAI
   ignores calls past ``max_tool_calls``.

What is stored and replayed is what the model saw, in order: each round's output items
as the upstream produced them (with our ids), then one ``function_call_output`` per
gateway call. Round *k+1*'s upstream body is round *k*'s with those items appended
(same fields, salt and session headers; rendered from the items' stored bytes), so each
round extends the previous one byte for byte and reuses its KV cache, and a later turn
continuing this one extends the last round in the same way. The client's ``output``
shows instead ``mcp_list_tools``, ``mcp_call`` (arguments, output or error) and
``mcp_approval_request`` items, and never the gateway's function call pairs. Nothing is
committed until the turn ends: a crash mid-loop leaves the previous head as it was.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.log import get_logger
from agentic_api.mcp.catalog import GatewayTool, ToolCatalog
from agentic_api.mcp.client import CallOutcome, McpLimits
from agentic_api.mcp.specs import is_mcp
from agentic_api.mcp.toolbox import McpToolbox, check_hosts
from agentic_api.settings import Settings
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.data.token_plan import TOKEN_IDS_FIELD
from agentic_api.turns.kinds.tool_events import GatewayEvents
from agentic_api.turns.prepare.render import (
    add_agentic_context,
    agentic_context_of,
    render_body,
    upstream_fields,
)
from agentic_api.turns.runner.finish import Completion, Ending
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.round import upstream_round
from agentic_api.wire import mcp as wire
from agentic_api.wire.items import Item, to_item
from agentic_api.wire.response_object import add_usage, empty_usage, normalize_usage
from lineage import IdKind, mint_id

log = get_logger("agentic_api.turns.tool_loop")

# Calls the client must answer itself: they end the turn.
CLIENT_CALL_TYPES = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
    }
)
DENIED = "The user denied this tool call; it was not run."


@dataclass
class PlannedCall:
    """A gateway call of this turn: the model's ``function_call`` item and where the
    client sees it."""

    tool: GatewayTool
    call: dict[str, Any]
    output_index: int
    client_id: str
    # Set when the call was approved by an earlier turn's client (shown on the mcp_call).
    approval_request_id: str | None = None

    @property
    def arguments(self) -> str:
        value = self.call.get("arguments")
        return value if isinstance(value, str) else ""


@dataclass
class LoopState:
    fields: dict[str, Any]
    prompt: list[Item]
    model_output: list[Item] = field(default_factory=list)
    output: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=empty_usage)
    upstream: dict[str, Any] = field(default_factory=dict)
    rounds: int = 0
    calls_run: int = 0


def check_mcp_hosts(turn: PreparedTurn, settings: Settings) -> None:
    """400 unless every MCP server of the turn is on the operator's allow-list."""
    check_hosts(
        turn.mcp_servers,
        allowed_hosts=settings.mcp_allowed_hosts,
        allow_loopback=settings.mcp_allow_loopback,
    )


async def run_tool_turn(run: TurnInProgress) -> Ending:
    return await ToolLoop(run).run()


class ToolLoop:
    def __init__(self, in_progress: TurnInProgress) -> None:
        self.in_progress = in_progress
        self.settings = in_progress.services.settings
        self.turn = in_progress.turn
        self.relay = in_progress.relay
        self.emit = in_progress.emit

    async def run(self) -> Ending:
        turn, settings = self.turn, self.settings
        check_mcp_hosts(turn, settings)
        # The sessions stay open until the turn has ended (turns/run.py closes them).
        toolbox = await self.in_progress.held.enter_async_context(
            McpToolbox(turn.mcp_servers, McpLimits.from_settings(settings))
        )
        client_tools = [t for t in turn.request.tools or () if not is_mcp(t)]
        catalog = toolbox.catalog(client_tools)
        resumed = self._resolve_approvals(catalog)
        state = LoopState(fields=self._fields(catalog), prompt=turn.sent_prompt_items)
        for server, _ in toolbox.listings:
            listed = [t.as_wire() for t in catalog.allowed[server.server_label]]
            state.output.append(
                wire.list_tools_item(mint_id(IdKind.MCP_LIST_TOOLS), server.server_label, listed)
            )
        # The client sees the tool listings right after the response opens.
        self.in_progress.after_opening = lambda: self._show_listings(state)
        if resumed:
            # Approved calls run before round 1: the client's stream starts now.
            self.in_progress.show_start({})
            await self._settle_approvals(toolbox, state, resumed)
        return await self._rounds(toolbox, catalog, state)

    # --- setup ------------------------------------------------------------------------

    def _fields(self, catalog: ToolCatalog) -> dict[str, Any]:
        request = self.turn.request
        fields = upstream_fields(
            request,
            cache_salt=self.turn.caller.cache_salt,
            session_id=self.turn.lineage.session_id,
            tags=self.turn.tags,
        )
        add_agentic_context(fields, self.turn.lineage, request, agentic_context_of(self.settings))
        fields["tools"] = catalog.upstream_tools(request.tools or [])
        if "tool_choice" in fields:
            fields["tool_choice"] = catalog.upstream_tool_choice(fields["tool_choice"])
        tokens = self.in_progress.tokens
        if tokens is not None and tokens.asked:
            fields.update(TOKEN_IDS_FIELD)
        return fields

    def _resolve_approvals(self, catalog: ToolCatalog) -> list[tuple[PlannedCall, str | None]]:
        """Each answered call with None when approved, else what to tell the model."""
        resumed: list[tuple[PlannedCall, str | None]] = []
        for pending in self.turn.approvals:
            tool = catalog.lookup(pending.function_name)
            if tool is None:
                raise InvalidRequest(
                    f"Approval request '{pending.answer.approval_request_id}' is for tool "
                    f"'{pending.function_name}', which none of this request's MCP tools "
                    "provides; send the same MCP tool again.",
                    param=f"{pending.param}.approval_request_id",
                    code="approval_tool_unavailable",
                )
            client_id = wire.derived_id(str(pending.call.get("id")), IdKind.MCP_CALL)
            planned = PlannedCall(
                tool,
                pending.call,
                -1,
                client_id or mint_id(IdKind.MCP_CALL),
                pending.answer.approval_request_id,
            )
            denial = None
            if not pending.answer.approve:
                reason = pending.answer.reason
                denial = f"{DENIED} Reason given: {reason}" if reason else DENIED
            resumed.append((planned, denial))
        return resumed

    def _show_listings(self, state: LoopState) -> None:
        for index, item in enumerate(state.output):
            if item["type"] == "mcp_list_tools":
                self._send(wire.list_tools_events(index, item))

    def _send(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.emit(self.relay.stamp(event))

    # --- approvals answered in the input ----------------------------------------------

    async def _settle_approvals(
        self,
        toolbox: McpToolbox,
        state: LoopState,
        resumed: list[tuple[PlannedCall, str | None]],
    ) -> None:
        """Runs approved calls and tells the model about denied ones, before round 1."""
        approved: list[PlannedCall] = []
        for planned, denial in resumed:
            if denial is not None:
                state.model_output.append(_call_output(planned.call, denial))
                continue
            planned.output_index = index = len(state.output)
            state.output.append(_call_item(planned, "in_progress"))
            self._send(wire.call_started_events(index, state.output[-1]))
            approved.append(planned)
        await self._run_calls(toolbox, state, approved)

    # --- rounds -------------------------------------------------------------------------

    async def _rounds(self, toolbox: McpToolbox, catalog: ToolCatalog, state: LoopState) -> Ending:
        settings, request = self.settings, self.turn.request
        gateway_events = GatewayEvents(catalog)
        while True:
            state.rounds += 1
            gateway_events.start_round()
            failure = await self._round(state, gateway_events)
            if failure is not None:
                return failure
            items = self.relay.final_output()
            status = self.relay.upstream_final.get("status") if self.relay.upstream_final else None
            planned, approvals, client_calls = self._take_round(
                catalog, gateway_events, state, items
            )
            if not planned:
                return self._finish(
                    state,
                    "incomplete" if status == "incomplete" else "completed",
                    state.upstream.get("incomplete_details"),
                )
            ends_for_client = bool(approvals or client_calls)
            reason: str | None = None
            if status == "incomplete":
                # The model was cut off: its calls are not run, the turn ends as it did.
                runnable: list[PlannedCall] = []
            elif not ends_for_client and state.rounds >= settings.max_tool_rounds:
                runnable, reason = [], "max_tool_rounds"
            else:
                room = len(planned)
                if request.max_tool_calls is not None:
                    room = max(request.max_tool_calls - state.calls_run, 0)
                runnable = planned[:room]
                if room < len(planned):
                    reason = "max_tool_calls"
            await self._run_calls(toolbox, state, runnable)
            self._skip_calls(state, planned[len(runnable) :], reason)
            if status == "incomplete":
                return self._finish(state, "incomplete", state.upstream.get("incomplete_details"))
            if reason is not None:
                # As OpenAI treats calls past max_tool_calls: not run, and the response
                # ends normally. (OpenAI's schema has no incomplete reason for a tool
                # limit; the calls not run show as ``incomplete`` mcp_call items.)
                return self._finish(state, "completed", None)
            if ends_for_client:
                return self._finish(state, "completed", None)

    async def _round(self, state: LoopState, gateway_events: GatewayEvents) -> ApiError | None:
        """One upstream request; the relay holds its final object afterwards, unless the
        round failed (the failure is returned)."""
        relay = self.relay
        relay.start_round(len(state.output))
        body = render_body(state.fields, [*state.prompt, *state.model_output])
        show_start = self.in_progress.show_start

        def handle(event: dict[str, Any]) -> None:
            if not relay.opened:
                show_start(event)
            ours = relay.translate(event, stamp=False)
            if ours is not None:
                self._send(gateway_events.convert(ours))

        failure = await upstream_round(self.in_progress, body, handle)
        if failure is not None:
            return failure
        final = relay.upstream_final or {}
        state.upstream = final
        state.usage = add_usage(state.usage, normalize_usage(final.get("usage")))
        return None

    def _take_round(
        self,
        catalog: ToolCatalog,
        gateway_events: GatewayEvents,
        state: LoopState,
        items: list[dict[str, Any]],
    ) -> tuple[list[PlannedCall], list[dict[str, Any]], bool]:
        """Records a round's items (model-visible and client-facing); returns the gateway
        calls to run, the approval requests made and whether the client has calls."""
        planned: list[PlannedCall] = []
        approvals: list[dict[str, Any]] = []
        client_calls = False
        for item in items:
            index = len(state.output)
            state.model_output.append(to_item(item))
            tool = (
                catalog.lookup(str(item.get("name")))
                if item.get("type") == "function_call"
                else None
            )
            if tool is None:
                client_calls = client_calls or item.get("type") in CLIENT_CALL_TYPES
                state.output.append(item)
                continue
            item_id = str(item.get("id"))
            if tool.requires_approval:
                request_id = wire.derived_id(item_id, IdKind.MCP_APPROVAL) or mint_id(
                    IdKind.MCP_APPROVAL
                )
                approval = wire.approval_request_item(
                    request_id,
                    server_label=tool.server.server_label,
                    name=tool.tool.name,
                    arguments=str(item.get("arguments", "")),
                )
                state.output.append(approval)
                approvals.append(approval)
                self._send(wire.approval_request_events(index, approval))
                continue
            client_id = wire.derived_id(item_id, IdKind.MCP_CALL) or mint_id(IdKind.MCP_CALL)
            call = PlannedCall(tool, item, index, client_id)
            state.output.append(_call_item(call, "in_progress"))
            if not gateway_events.announced(index):
                self._send(wire.call_started_events(index, state.output[-1]))
            planned.append(call)
        return planned, approvals, client_calls

    # --- running calls ------------------------------------------------------------------

    async def _run_calls(
        self, toolbox: McpToolbox, state: LoopState, calls: list[PlannedCall]
    ) -> None:
        if not calls:
            return
        # Once a tool has run, the turn has happened: failures after that are stored.
        self.in_progress.worked = True
        outcomes = await asyncio.gather(*(toolbox.call(c.tool, c.arguments) for c in calls))
        state.calls_run += len(calls)
        for call, outcome in zip(calls, outcomes, strict=True):
            log.info(
                "mcp call",
                response_id=self.turn.response_id,
                server_label=call.tool.server.server_label,
                tool=call.tool.tool.name,
                failed=outcome.failed,
                seconds=round(outcome.seconds, 3),
            )
            item = _call_item(call, outcome.status, outcome)
            state.output[call.output_index] = item
            state.model_output.append(_call_output(call.call, outcome.model_text()))
            self._send(wire.call_finished_events(call.output_index, item))

    def _skip_calls(self, state: LoopState, calls: list[PlannedCall], reason: str | None) -> None:
        """Calls past a limit: not run; the model is told so (its history stays a
        well-formed call/output sequence) and the client sees them ``incomplete``."""
        note = {
            "max_tool_calls": "this response reached its max_tool_calls",
            "max_tool_rounds": "this response reached the server's limit of model rounds",
            None: "the model's output was cut off",
        }[reason]
        for call in calls:
            item = _call_item(call, "incomplete")
            state.output[call.output_index] = item
            state.model_output.append(_call_output(call.call, f"Not run: {note}."))
            self._send(wire.call_finished_events(call.output_index, item))

    def _finish(
        self, state: LoopState, status: str, incomplete_details: dict[str, Any] | None
    ) -> Completion:
        return Completion(
            status=status,
            output=state.output,
            model_output=state.model_output,
            usage=state.usage,
            upstream=state.upstream,
            incomplete_details=incomplete_details,
        )


def _call_item(
    call: PlannedCall, status: str, outcome: CallOutcome | None = None
) -> dict[str, Any]:
    return mcp_call_item(
        call.client_id, call.tool, call.arguments, status, outcome, call.approval_request_id
    )


def mcp_call_item(
    client_id: str,
    tool: GatewayTool,
    arguments: str,
    status: str,
    outcome: CallOutcome | None = None,
    approval_request_id: str | None = None,
) -> dict[str, Any]:
    """The ``mcp_call`` item the client sees of a gateway call (here and in a multi-agent
    tree, ``multi_agent/gateway.py``): ``outcome`` once it ran."""
    return wire.call_item(
        client_id,
        server_label=tool.server.server_label,
        name=tool.tool.name,
        arguments=arguments,
        status=status,
        output=outcome.output if outcome else None,
        error=outcome.error if outcome else None,
        approval_request_id=approval_request_id,
    )


def _call_output(call: dict[str, Any], text: str) -> Item:
    """What the model is shown of a gateway call: a plain function call output."""
    return to_item(
        {
            "type": "function_call_output",
            "id": mint_id(IdKind.FUNCTION_CALL_OUTPUT),
            "call_id": call["call_id"],
            "output": text,
        }
    )
