"""Automatic compaction (``context_management``) for every agent of a tree.

Before each of an agent's rounds, its prompt (the shared fields and what it would send)
is counted as a single-agent turn's is (``kinds/threshold_compaction.py``: the engine's
render when it has one, else bytes / 4). Past ``compact_threshold`` the agent first runs
its own summary round: the summary request of ``compaction_trigger`` over its window (from
its latest ``compaction`` item on), sent on its own routing coordinates and placed like
its other rounds, counted in its usage and token account. The ``compaction`` item joins
the agent's items (stored after what it had seen, as a single-agent turn stores it) and
is shown to the client with the agent's name; from then on the agent sends the compaction,
the calls its unanswered tool outputs answer, those outputs and messages, then what comes
after (``kinds/threshold_compaction.py:answer_window``), and the tree goes on. A tree that
never passes the threshold sends exactly what it would without ``context_management``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentic_api.errors import ApiError, UpstreamError
from agentic_api.log import get_logger
from agentic_api.turns.kinds.compaction import compaction_item
from agentic_api.turns.kinds.multi_agent.tree import Agent, Tree
from agentic_api.turns.kinds.threshold_compaction import answer_window, prompt_size
from agentic_api.turns.prepare.render import render_body
from agentic_api.turns.prepare.summary_request import compacted_window, summary_body, summary_text
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.wire.items import Item, to_item
from agentic_api.wire.multi_agent import attributed
from agentic_api.wire.response_object import normalize_usage
from lineage import IdKind, mint_id

log = get_logger("agentic_api.turns.multi_agent")

# One model round of an agent: its answer in the relay, or the failure.
Call = Callable[[Agent, StreamRelay, bytes], Awaitable[ApiError | None]]


def start_window(agent: Agent) -> None:
    """A ``context_management`` tree's root sends its prompt from the latest compaction
    item on, as a single-agent turn's does (``turns/prepare/turn.py``)."""
    window = compacted_window(agent.items)
    if len(window) < len(agent.items):
        agent.window, agent.window_end = window, len(agent.items)


class Compactor:
    def __init__(
        self,
        run: TurnInProgress,
        tree: Tree,
        fields_for: Callable[[Agent], dict[str, Any]],
        threshold: int,
        call: Call,
    ) -> None:
        self.run, self.tree, self.fields_for = run, tree, fields_for
        self.threshold, self.call = threshold, call

    async def before_round(self, agent: Agent) -> ApiError | None:
        """Compacts ``agent`` when its next round's prompt passes the threshold; returns
        the summary round's failure, if any."""
        run = self.run
        fields = self.fields_for(agent)
        view = agent.visible()
        size = await prompt_size(
            run.services, run.turn.request.model, render_body(fields, view), run.turn.headers
        )
        passes = size.tokens > self.threshold
        log.info(
            "agent context counted for compaction",
            response_id=run.turn.response_id,
            agent=agent.name,
            input_tokens=size.tokens,
            counted=size.counted,
            compact_threshold=self.threshold,
            compacts=passes,
        )
        if not passes:
            return None
        window = compacted_window(view)
        in_view = {id(item) for item in view}
        unanswered = [item for item in agent.items[agent.answered :] if id(item) in in_view]
        relay = agent.relay
        assert relay is not None
        agent.rounds += 1
        agent.summary_rounds += 1
        relay.start_round(0)
        body = summary_body(fields, window, run.turn.request.max_output_tokens)
        async with self.tree.model_turn(agent):
            failure = await self.call(agent, relay, body)
        if agent.parent is None:
            run.show_start({})
        if failure is not None:
            return failure
        final = relay.upstream_final or {}
        self.tree.count_usage(agent, normalize_usage(final.get("usage")))
        summary = summary_text(final)
        if not summary:
            return UpstreamError("The model returned no summary to compact the history with.")
        item = compaction_item(mint_id(IdKind.COMPACTION), summary)
        compaction: Item = to_item(item)
        agent.items.append(compaction)
        agent.window = answer_window(compaction, window, unanswered)
        agent.window_end = len(agent.items)
        self.tree.publish(attributed(item, agent.name))
        return None
