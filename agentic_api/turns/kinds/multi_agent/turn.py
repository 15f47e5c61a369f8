"""A multi-agent response (the hosted multi-agent beta): the root agent's loop, the tree it
grows, and how the response ends.

The root agent is the response's own model: its rounds are the response's rounds (its
token plan and account are the response's), and what it saw is what is stored and
replayed: its prompt, its output, each action's ``function_call`` and
``function_call_output``, as for a turn that runs tools. The client's ``output`` is the
whole tree's, in the order things happened, every item carrying its agent's name. The
response's ``usage`` counts every agent's rounds.

The request's MCP servers are listed before the root's first round (``gateway.py``), and
with ``context_management`` every agent compacts on its own when its prompt passes the
threshold (``compacting.py``).

When the root answers without an action (or calls a client function), the response
waits for its subagents still running to finish their tasks (their items and answers are
shown), then ends. Past the wall time
(``AGENTIC_MULTI_AGENT_MAX_SECONDS``) the tree stops and the response fails with code
``multi_agent_time_limit``. A cancelled response (a background cancel, a client that
leaves with ``AGENTIC_STREAM_DISCONNECT=cancel``) cancels every agent's task with it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.errors import ApiError
from agentic_api.mcp.catalog import ToolCatalog
from agentic_api.storage.agent_rounds import AgentRoundRepository
from agentic_api.storage.models import Response
from agentic_api.turns.data.commit_steps import CommitHooks
from agentic_api.turns.data.token_plan import TOKEN_IDS_FIELD
from agentic_api.turns.kinds.multi_agent.branches import store_subagents
from agentic_api.turns.kinds.multi_agent.compacting import Compactor, start_window
from agentic_api.turns.kinds.multi_agent.gateway import open_tree_tools
from agentic_api.turns.kinds.multi_agent.loop import AgentLoop
from agentic_api.turns.kinds.multi_agent.shown import TreeOutput
from agentic_api.turns.kinds.multi_agent.tree import Agent, Tree
from agentic_api.turns.kinds.multi_agent.waits import WaitsKeptWarm
from agentic_api.turns.prepare.render import (
    add_agentic_context,
    agentic_context_of,
    upstream_fields,
)
from agentic_api.turns.prepare.summary_request import compact_threshold
from agentic_api.turns.runner.finish import Completion, Ending
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.wire.mcp import list_tools_events
from agentic_api.wire.multi_agent import DEFAULT_MAX_CONCURRENT_SUBAGENTS, ROOT_AGENT
from agentic_api.wire.multi_agent_tools import TOOLS


async def run_multi_agent_turn(run: TurnInProgress) -> Ending:
    turn, settings = run.turn, run.services.settings
    config = turn.request.multi_agent
    max_concurrent = config.max_concurrent_subagents if config else DEFAULT_MAX_CONCURRENT_SUBAGENTS
    shown = TreeOutput(lambda event: run.emit(run.relay.stamp(event)))
    output = shown.items
    tree = Tree(settings, max_concurrent, shown, run.tokens.block_size if run.tokens else None)
    # The request's MCP servers, listed before anything runs (their refusals are the
    # request's); the client sees the listings right after the response opens.
    tools = await open_tree_tools(run)
    listings = tools.listings() if tools is not None else []
    output.extend(listings)
    if listings:

        def show_listings() -> None:
            for index, item in enumerate(listings):
                for event in list_tools_events(index, item):
                    run.emit(run.relay.stamp(event))

        run.after_opening = show_listings
    injections = run.injections
    if injections is not None:

        def acknowledge() -> None:
            # In the response's own stream, so its sequence numbers stay contiguous.
            run.emit(
                run.relay.stamp(
                    {"type": "response.inject.created", "response_id": turn.response_id}
                )
            )

        injections.on_accepted = acknowledge
    fields = _shared_fields(run, tools.catalog if tools is not None else None)
    # A tool choice that forces a call applies to the root's first round only: applied to
    # every round (and every subagent, which shares the fields) it would never let an
    # agent answer. One that forces spawn_agent asks the root to delegate: it applies to
    # the root's rounds until it has started max_concurrent_subagents subagents (as many
    # as may run at once; a model that makes one call per round then still starts them
    # all), bounded by the rounds limit. The choice is not part of the rendered prompt,
    # so the prefix each subagent shares with its parent is the same either way.
    choice = fields.get("tool_choice")
    forces = choice == "required" or isinstance(choice, dict)
    forces_spawn = isinstance(choice, dict) and choice.get("name") == "spawn_agent"
    later = {**fields, "tool_choice": "auto"} if forces else fields

    def forced(agent: Agent) -> bool:
        if agent.parent is not None:
            return False
        if agent.rounds - agent.summary_rounds == 1:
            return True
        started = sum(1 for other in tree.subagents() if other.parent is agent)
        return forces_spawn and started < max_concurrent

    context = agentic_context_of(settings)

    def fields_for(agent: Agent) -> dict[str, Any]:
        own = fields if forced(agent) else later
        if context is None:
            return own
        own = dict(own)
        add_agentic_context(own, turn.lineage, turn.request, context, agent.name)
        return own

    loop = AgentLoop(run, tree, fields_for)
    loop.tools = tools
    threshold = compact_threshold(turn.request)
    if threshold is not None:
        loop.before_round = Compactor(run, tree, fields_for, threshold, loop.call).before_round
    policy = run.services.keep_warm
    if policy is not None:
        # An agent waiting on its subagents is a paused session (waits.py).
        waits = WaitsKeptWarm(run, tree, policy, fields_for)
        tree.waiting, tree.counted = waits.waiting, waits.after_round

    def start(agent: Agent) -> None:
        if agent.relay is None:
            agent.relay = StreamRelay(turn.base)
        agent.task = asyncio.ensure_future(loop.run_subagent(agent))

    tree.start = start
    root = Agent(name=ROOT_AGENT, parent=None, depth=0, items=turn.sent_prompt_items)
    root.relay = run.relay
    new_input = {id(item) for item in turn.new_input}
    root.answered = next(
        (index for index, item in enumerate(root.items) if id(item) in new_input),
        len(root.items),
    )
    if threshold is not None:
        start_window(root)
    tree.add(root)
    prompt_length = len(root.items)
    try:
        async with asyncio.timeout(settings.multi_agent_max_seconds):
            outcome = await loop.rounds(root)
            if not isinstance(outcome, ApiError):
                # The response ends when the whole tree has: work under way is finished
                # and shown, not thrown away (a root that wants it stopped interrupts it).
                await tree.settle()
    except TimeoutError:
        outcome = ApiError(
            f"The multi-agent response took longer than {settings.multi_agent_max_seconds:g} "
            "seconds, the most this server allows (AGENTIC_MULTI_AGENT_MAX_SECONDS).",
            status_code=500,
            error_type="server_error",
            code="multi_agent_time_limit",
        )
    finally:
        # However the root ended (or was cancelled), no subagent outlives the response.
        await tree.stop_all()
    if isinstance(outcome, ApiError):
        return outcome
    _store_with_the_response(run, tree)
    return Completion(
        status="incomplete" if outcome == "incomplete" else "completed",
        output=output,
        model_output=root.items[prompt_length:],
        usage=tree.usage,
        upstream=run.relay.upstream_final or {},
        incomplete_details=(run.relay.upstream_final or {}).get("incomplete_details")
        if outcome == "incomplete"
        else None,
    )


def _shared_fields(run: TurnInProgress, catalog: ToolCatalog | None) -> dict[str, Any]:
    """The fields every agent's request shares: the client's request as rendered for the
    upstream, non-streamed (the tree shows items as they are decided), with the six
    actions after the client's tools (each MCP entry replaced by its server's tools, as
    the tool loop sends them)."""
    turn = run.turn
    fields = upstream_fields(
        turn.request,
        cache_salt=turn.caller.cache_salt,
        session_id=turn.lineage.session_id,
        tags=turn.tags,
    )
    fields["stream"] = False
    tools = fields.get("tools") or []
    if catalog is not None:
        tools = catalog.upstream_tools(turn.request.tools or [])
        if "tool_choice" in fields:
            fields["tool_choice"] = catalog.upstream_tool_choice(fields["tool_choice"])
    fields["tools"] = [*tools, *TOOLS]
    tokens = run.tokens
    if tokens is not None and tokens.asked:
        fields.update(TOKEN_IDS_FIELD)
    return fields


def _store_with_the_response(run: TurnInProgress, tree: Tree) -> None:
    """Every agent's rounds (its token account) and every subagent's own response
    (branches.py) are written in the response's commit."""
    turn = run.turn

    async def store(session: AsyncSession, row: Response) -> None:
        await AgentRoundRepository(session).insert(row.tenant_id, row.id, tree.rounds)
        await store_subagents(session, turn, row, tree.subagents())

    hooks = run.hooks
    run.hooks = CommitHooks(steps=(*hooks.steps, store), event_log=hooks.event_log)
