"""Keep-warm for agents of a tree waiting on their subagents (``AGENTIC_KEEP_WARM_ENABLED``).

An agent that waits on its subagents (``wait_agent`` with one still running) is paused as
an agent running a client's tool is: its next round starts with everything its last round
sent and produced, and while its children run (their own prefixes pushing on the cache,
other sessions' too) the replica may evict it. For the wait it is a paused session of the
keep-warm policy (``cache/keep_warm.py``, under the key ``session + agent name``, the
``task_id`` of its ``agentic_context``), re-warmed within the same bounds when its prefix
is seen dropping: the re-warm sends that prefix (the agent's own fields and items, one
output token, discarded) on the same routing coordinates as its next round. The policy
forgets it when the wait returns; its next round's cached tokens settle the re-warm
(``paid_off`` when every full block of the paused prompt came back cached).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentic_api.cache.keep_warm import KeepWarm, Pause
from agentic_api.turns.kinds.multi_agent.tree import Agent, Tree
from agentic_api.turns.prepare.render import render_body
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.upstream.token_fields import ReportedTokens
from agentic_api.wire.items import Item
from agentic_api.wire.response_object import normalize_usage


class WaitsKeptWarm:
    def __init__(
        self,
        run: TurnInProgress,
        tree: Tree,
        policy: KeepWarm,
        fields_for: Callable[[Agent], dict[str, Any]],
    ) -> None:
        self.run, self.tree, self.policy, self.fields_for = run, tree, policy, fields_for
        # The pause of each agent back from a wait, until its next round settles it.
        self._back: dict[str, Pause] = {}

    @contextmanager
    def waiting(self, agent: Agent) -> Iterator[None]:
        """While ``agent`` waits on running subagents."""
        turn = self.run.turn
        last = next((r for r in reversed(self.tree.rounds) if r.agent_name == agent.name), None)
        relay = agent.relay
        reported = relay.token_rounds[-1] if relay is not None and relay.token_rounds else None
        tokens = (
            [*reported.prompt, *reported.output] if isinstance(reported, ReportedTokens) else None
        )
        items = agent.visible()
        pause = Pause(
            session_id=turn.lineage.session_id,
            response_id=agent.response_id or turn.response_id,
            tenant_id=turn.caller.tenant_id,
            salt_epoch=turn.caller.salt_epoch,
            cache_salt=turn.caller.cache_salt,
            request=turn.request,
            paused_at=self.policy.now(),
            input_tokens=last.input_tokens if last else 0,
            output_tokens=last.output_tokens if last else 0,
            key=turn.lineage.session_id + agent.name,
            warm=lambda: self._warm(agent, items),
            tokens=tokens,
        )
        self.policy.agent_waiting(pause)
        try:
            yield
        finally:
            self.policy.agent_back(pause)
            self._back[agent.name] = pause

    def after_round(self, agent: Agent, cached_tokens: int) -> None:
        pause = self._back.pop(agent.name, None)
        if pause is not None:
            self.policy.agent_round(pause, cached_tokens)

    async def _warm(self, agent: Agent, items: list[Item]) -> dict[str, Any]:
        fields = {**self.fields_for(agent), "max_output_tokens": 1}
        final = await self.run.services.upstream.create_response(
            render_body(fields, items), self.run.turn.headers
        )
        return normalize_usage(final.get("usage"))
