"""One agent's model loop, the root's and every subagent's alike.

Each round sends the agent's items (after the tree's shared fields) upstream as one JSON
request. Its answer's items join the agent's items (what it sees next) and are shown to
the client with the agent's name: a call of one of the six actions as a
``multi_agent_call`` (the tree does it at once and the result joins the agent's items as a
``function_call_output``, shown as ``multi_agent_call_output``), a call of one of the
request's MCP tools as an ``mcp_call``, announced where the round made it and settled once
the gateway ran it (``gateway.py``, ``shown.py``; its output joins the agent's items the
same way), anything else as it is. With ``context_management``
an agent past the threshold compacts before its round (``compacting.py``).
The loop ends when a round asks for no action: the agent's answer is final. A call of a
client function ends the root's response (the client answers it by continuing, as for any
function call) unless the client can inject its output (the beta WebSocket's
``response.inject``): then the agent waits for it and goes on, and so does the rest of the
tree meanwhile. Over HTTP a subagent cannot wait for a client, so it ends with an error
its parent reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.turns.kinds.multi_agent.actions import NAMES
from agentic_api.turns.kinds.multi_agent.gateway import GatewayCall, TreeTools
from agentic_api.turns.kinds.multi_agent.tree import Agent, Tree, user_message
from agentic_api.turns.kinds.tool_loop import CLIENT_CALL_TYPES
from agentic_api.turns.prepare.render import render_body
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.placing import answered_tokens
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.turns.runner.round import upstream_outcome_error
from agentic_api.upstream.errors import UpstreamInterrupted
from agentic_api.wire.items import Item, to_item
from agentic_api.wire.multi_agent import agent_message_item, attributed, call_item, call_output_item
from agentic_api.wire.response_object import normalize_usage
from lineage import IdKind, mint_id

log = get_logger("agentic_api.turns.multi_agent")

# How an agent's task ended.
Outcome = Literal["completed", "incomplete", "client_call", "max_rounds"] | ApiError

NOT_RUN = "Not run: the model's output was cut off."

SUBAGENT_CLIENT_CALL = (
    "called a client function tool; over HTTP a subagent cannot wait for the client's "
    "answer (response.inject needs the beta WebSocket), so its task ended"
)


class AgentLoop:
    def __init__(
        self,
        run: TurnInProgress,
        tree: Tree,
        fields_for: Callable[[Agent], dict[str, Any]],
    ) -> None:
        self.run = run
        self.tree = tree
        self.fields_for = fields_for
        self.max_rounds = run.services.settings.multi_agent_max_rounds
        # The request's MCP tools (gateway.py), and what runs before each round (a
        # context_management tree's compaction: compacting.py).
        self.tools: TreeTools | None = None
        self.before_round: Callable[[Agent], Awaitable[ApiError | None]] | None = None

    async def rounds(self, agent: Agent) -> Outcome:
        relay = agent.relay
        assert relay is not None
        # The limit is per task: a follow-up task starts counting again.
        task_rounds = 0
        while True:
            for text in agent.inbox:
                agent.items.append(user_message(text))
            agent.inbox.clear()
            if task_rounds >= self.max_rounds:
                return "max_rounds"
            task_rounds += 1
            if self.before_round is not None:
                failure = await self.before_round(agent)
                if failure is not None:
                    return failure
            agent.rounds += 1
            agent.sent, agent.sent_end = agent.visible(), len(agent.items)
            body = render_body(self.fields_for(agent), agent.sent)
            relay.start_round(0)
            async with self.tree.model_turn(agent):
                failure = await self.call(agent, relay, body)
            if agent.parent is None:
                # The client's stream opens once the root's first round is answered.
                self.run.show_start({})
            if failure is not None:
                return failure
            final = relay.upstream_final or {}
            self.tree.count_usage(agent, normalize_usage(final.get("usage")))
            cut = final.get("status") == "incomplete"
            outcome = await self._take(agent, relay.final_output(), cut=cut)
            if outcome is not None:
                return outcome
            if cut:
                return "incomplete"

    async def call(self, agent: Agent, relay: StreamRelay, body: bytes) -> ApiError | None:
        """One model round of ``agent``: its answer in ``relay``, or the failure."""
        root = agent.parent is None
        headers = self.run.turn.headers
        try:
            # Placed like every round of the turn (named replicas): the tree's agents carry
            # the root's session, so they share its home and follow its resident prefix.
            relay.upstream_final = await self.run.placer.call(
                lambda upstream: upstream.create_response(body, headers), answered_tokens
            )
        except UpstreamInterrupted as exc:
            return exc
        except ApiError as exc:
            if root and not self.run.begun:
                raise  # the root's first round refused: the request's own error
            return exc
        if root:
            self.run.worked = True
        return upstream_outcome_error(relay)

    async def _take(
        self, agent: Agent, items: list[dict[str, Any]], *, cut: bool = False
    ) -> Outcome | None:
        """Takes a round's items; returns how the task ended, or None to go on. ``cut``:
        the model was cut off (its output limit): its actions are not done (as the tool
        loop does not run a cut-off round's calls); each is answered "not run", so its
        history stays a well-formed call/output sequence."""
        actions = [i for i in items if i.get("type") == "function_call" and i.get("name") in NAMES]
        tools = self.tools
        gateway: dict[int, GatewayCall] = {}
        for index, item in enumerate(items):
            planned = None if tools is None or item in actions else tools.lookup(item)
            if planned is not None:
                gateway[index] = planned
        final = not actions and not gateway
        client_call = False
        waits: list[str] = []
        injections = self.run.injections
        # Where each MCP call is shown: announced here, settled once it has run (below).
        shown_at: dict[int, int] = {}
        for index, item in enumerate(items):
            agent.items.append(to_item(item))
            if index in gateway:
                shown_at[index] = self.tree.shown.start_call(
                    gateway[index].shown(agent.name, "in_progress")
                )
                continue
            if item in actions:
                self.tree.publish(
                    call_item(
                        str(item["name"]),
                        str(item.get("arguments") or ""),
                        str(item["call_id"]),
                        agent.name,
                    )
                )
                continue
            calls_client = item.get("type") in CLIENT_CALL_TYPES
            client_call = client_call or calls_client
            shown = attributed(item, agent.name)
            if final and agent.parent is None and item.get("type") == "message":
                shown["phase"] = "final_answer"
            self.tree.publish(shown)
            if calls_client and injections is not None and isinstance(item.get("call_id"), str):
                injections.expect(str(item["call_id"]))
                waits.append(str(item["call_id"]))
        # What follows is the next round's new input (what a compaction keeps).
        agent.answered = len(agent.items)
        try:
            ran = iter(
                await tools.run_calls(agent.name, list(gateway.values()))
                if tools is not None and not cut
                else ()
            )
        except asyncio.CancelledError:
            # Interrupted (interrupt_agent, the tree stopped, its time up) while its MCP
            # calls ran: each announced call is settled as not finished, so neither the
            # stream nor the stored output keeps a call in progress forever.
            for index, at in shown_at.items():
                self.tree.shown.finish_call(at, gateway[index].shown(agent.name, "incomplete"))
            raise
        # Each call's output in the order of the calls.
        for index, call in enumerate(items):
            call_id = str(call.get("call_id"))
            if index in gateway:
                if cut:
                    result, shown = NOT_RUN, gateway[index].shown(agent.name, "incomplete")
                else:
                    result, shown = next(ran)
                agent.items.append(_output(call_id, result))
                self.tree.shown.finish_call(shown_at[index], shown)
                continue
            if call not in actions:
                continue
            action = str(call["name"])
            if cut:
                result = '{"error": "Not run: the model\'s output was cut off."}'
            else:
                result = await self.tree.act(agent, action, str(call.get("arguments") or ""))
            agent.items.append(_output(call_id, result))
            self.tree.publish(call_output_item(action, call_id, result, agent.name))
        if cut:
            agent.final_text = _text_of(items)
            return "incomplete"
        if client_call and injections is not None and waits:
            # The client answers over the WebSocket (response.inject): this agent waits,
            # the rest of the tree goes on.
            for call_id in waits:
                answer = await injections.wait(call_id)
                agent.items.append(
                    to_item(
                        {**answer, "id": answer.get("id") or mint_id(IdKind.FUNCTION_CALL_OUTPUT)}
                    )
                )
            return None
        if client_call:
            return "client_call"
        if final:
            agent.final_text = _text_of(items)
            return "completed"
        return None

    async def run_subagent(self, agent: Agent) -> None:
        """A subagent's task, to its end; its parent learns how it ended."""
        try:
            outcome: Outcome = await self.rounds(agent)
        except asyncio.CancelledError:
            if agent.status == "running":
                agent.status = "interrupted"
            agent.finished.set()
            raise
        except Exception as exc:  # a fault of ours: the subagent fails, the tree goes on
            log.exception("subagent failed", agent=agent.name)
            outcome = ApiError(f"{agent.name} failed: {type(exc).__name__}")
        if isinstance(outcome, ApiError):
            agent.status, agent.error = "errored", outcome.message
        elif outcome == "client_call":
            agent.status, agent.error = "errored", f"{agent.name} {SUBAGENT_CLIENT_CALL}"
        elif outcome == "max_rounds":
            agent.status = "errored"
            agent.error = (
                f"{agent.name} took {self.max_rounds} model rounds, the most this server "
                "allows per task (AGENTIC_MULTI_AGENT_MAX_ROUNDS)"
            )
        else:
            agent.status = "completed"
        parent = agent.parent
        assert parent is not None
        report = agent.final_text if agent.status == "completed" else agent.error
        self.tree.publish(agent_message_item(agent.name, parent.name, report or ""))
        agent.finished.set()


def _output(call_id: str, result: str) -> Item:
    return to_item(
        {
            "type": "function_call_output",
            "id": mint_id(IdKind.FUNCTION_CALL_OUTPUT),
            "call_id": call_id,
            "output": result,
        }
    )


def _text_of(items: list[dict[str, Any]]) -> str:
    texts: list[str] = []
    for item in items:
        if item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            if isinstance(part, dict) and part.get("type") == "output_text":
                texts.append(str(part.get("text") or ""))
    return "\n".join(texts)
