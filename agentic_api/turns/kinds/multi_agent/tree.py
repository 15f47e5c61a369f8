"""The agent tree of one multi-agent response: its agents, what they see, the limits, and
the six actions done on it.

Every agent is a model loop of its own (``loop.py``) over its own model-visible items.
A spawned agent's items **start with its parent's prompt as the parent's last round sent
it** (the same instructions and tools first, then the history up to the call), then its
task as a user message: the model server has that whole prefix cached from the parent's
round, so the child's first request recomputes only its task. Its upstream request carries
the root's session coordinates (``X-Session-ID``, body ``session_id``) so a router keeps
the tree on one replica.

Concurrency: at most ``max_concurrent_subagents`` subagents are in a model round at once,
across the whole tree (the root is not counted, as OpenAI documents). An agent holds its
place only while the model works for it, never while it waits on others, so a parent
waiting on its children can never starve them.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from agentic_api.cache.accounting import common_prefix
from agentic_api.settings import Settings
from agentic_api.storage.agent_rounds import AgentRound
from agentic_api.turns.kinds.multi_agent.actions import (
    ActionRefused,
    ListAgents,
    Message,
    Spawn,
    Target,
    Wait,
    parse,
    resolve,
)
from agentic_api.turns.kinds.multi_agent.shown import TreeOutput
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.upstream.token_fields import ReportedTokens
from agentic_api.wire.items import Item, to_item
from agentic_api.wire.multi_agent import ROOT_AGENT, agent_message_item
from agentic_api.wire.response_object import add_usage, empty_usage
from lineage import IdKind, mint_id

Status = Literal["running", "completed", "errored", "interrupted"]


@dataclass(eq=False)
class Agent:
    name: str
    parent: Agent | None
    depth: int
    # Everything it saw and produced, in order: what is stored (its response's items; the
    # root's are the response's) and, until it compacts, what its next round sends.
    items: list[Item]
    # The items of its latest round's request (what the model server has cached), and
    # how many of ``items`` stood behind them then.
    sent: list[Item] = field(default_factory=list)
    sent_end: int = 0
    # Once it compacted (``context_management``, compacting.py), its rounds send
    # ``window`` (the compaction, then what it had not answered yet) and then
    # ``items[window_end:]``: everything it saw before is in the summary.
    window: list[Item] | None = None
    window_end: int = 0
    # Where the items its model has not answered yet begin in ``items`` (the new input
    # of its next round: a compaction keeps them after the summary).
    answered: int = 0
    relay: StreamRelay | None = None
    status: Status = "running"
    last_task: str = ""
    final_text: str | None = None
    error: str | None = None
    # Messages for it, read before its next round.
    inbox: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=empty_usage)
    rounds: int = 0
    # Of those, its compaction's summary rounds (compacting.py): not the model's turns at
    # the task, so a forced tool choice still applies to the root's first real round.
    summary_rounds: int = 0
    # The prompt's token ids of its latest round, and (a subagent) of its parent's round
    # that spawned it, when the upstream reports them: its first request's expected reuse.
    last_prompt: array[int] | None = None
    parent_prompt: array[int] | None = None
    # A subagent's own stored response (minted at its spawn, stored with the response
    # whose tree it belongs to), and how many of its items it started with.
    response_id: str | None = None
    started_with: int = 0
    task: asyncio.Task[None] | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def visible(self) -> list[Item]:
        """What its next round sends after the shared fields."""
        if self.window is None:
            return list(self.items)
        return [*self.window, *self.items[self.window_end :]]

    def summary(self) -> dict[str, Any]:
        return {
            "agent_name": self.name,
            "status": self.status,
            "last_task_message": self.last_task,
            "final_answer": self.final_text,
            **({"error": self.error} if self.error else {}),
        }


def user_message(text: str) -> Item:
    return to_item(
        {
            "type": "message",
            "id": mint_id(IdKind.MESSAGE),
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
    )


def task_message(agent: Agent, message: str) -> str:
    parent = agent.parent.name if agent.parent else ROOT_AGENT
    return (
        f"You are the subagent {agent.name}, started by {parent}. Everything above is "
        f"{parent}'s conversation so far. Your task:\n{message}\n"
        f"Your final answer is sent back to {parent}."
    )


class TreeLimit(Exception):
    """The tree's wall time ran out."""


class Tree:
    """``shown`` is what the client sees (``publish`` shows an item, attributed
    already); ``start`` runs an agent's loop as a task of the tree."""

    def __init__(
        self,
        settings: Settings,
        max_concurrent: int,
        shown: TreeOutput,
        block_size: int | None = None,
    ) -> None:
        self.settings = settings
        # The KV block size reuse is counted in (None: no token accounting).
        self.block_size = block_size
        # Every agent's rounds, in the order they were answered (stored with the response).
        self.rounds: list[AgentRound] = []
        self.shown = shown
        self.publish = shown.publish
        self.slots = asyncio.Semaphore(max_concurrent)
        self.agents: dict[str, Agent] = {}
        self.spawned = 0
        self.start: Callable[[Agent], None] = lambda agent: None
        # While an agent waits on running subagents (keep-warm pauses it: waits.py), and
        # each agent's round as it is counted (its cached tokens).
        self.waiting: Callable[[Agent], AbstractContextManager[None]] = lambda agent: nullcontext()
        self.counted: Callable[[Agent, int], None] = lambda agent, cached: None
        self.usage: dict[str, Any] = empty_usage()

    def add(self, agent: Agent) -> None:
        self.agents[agent.name] = agent

    @asynccontextmanager
    async def model_turn(self, agent: Agent) -> AsyncIterator[None]:
        """While the model works for ``agent`` (a subagent takes one of the tree's places)."""
        if agent.parent is None:
            yield
            return
        async with self.slots:
            yield

    def count_usage(self, agent: Agent, usage: dict[str, Any]) -> None:
        agent.usage = add_usage(agent.usage, usage)
        self.usage = add_usage(self.usage, usage)
        relay = agent.relay
        reported = relay.token_rounds[-1] if relay is not None and relay.token_rounds else None
        prompt = reported.prompt if isinstance(reported, ReportedTokens) else None
        shared = expected = None
        if (
            agent.rounds == 1
            and agent.parent_prompt is not None
            and prompt is not None
            and self.block_size
        ):
            shared = common_prefix(agent.parent_prompt, prompt)
            expected = shared // self.block_size * self.block_size
        agent.last_prompt = prompt
        details = usage.get("input_tokens_details") or {}
        self.counted(agent, int(details.get("cached_tokens") or 0))
        self.rounds.append(
            AgentRound(
                agent_name=agent.name,
                parent_agent=agent.parent.name if agent.parent else None,
                round=agent.rounds,
                input_tokens=int(usage.get("input_tokens") or 0),
                cached_tokens=int(details.get("cached_tokens") or 0),
                output_tokens=int(usage.get("output_tokens") or 0),
                shared_prefix_tokens=shared,
                expected_cached=expected,
            )
        )

    def subagents(self) -> Iterator[Agent]:
        return (agent for agent in self.agents.values() if agent.parent is not None)

    # --- the actions -----------------------------------------------------------------

    async def act(self, agent: Agent, action: str, arguments: str) -> str:
        """Does ``action`` for ``agent``; returns its result as the model reads it."""
        try:
            parsed = parse(action, arguments)
            if isinstance(parsed, Spawn):
                return self._spawn(agent, parsed)
            if isinstance(parsed, Wait):
                return await self._wait(agent, parsed)
            if isinstance(parsed, Message):
                if action == "send_message":
                    return self._send(agent, parsed)
                return self._followup(agent, parsed)
            if isinstance(parsed, Target):
                return await self._interrupt(agent, parsed)
            return self._list(parsed)
        except ActionRefused as refused:
            return _json({"error": str(refused)})

    def _spawn(self, parent: Agent, spawn: Spawn) -> str:
        name = f"{parent.name}/{spawn.task_name}"
        if name in self.agents:
            raise ActionRefused(f"spawn_agent: an agent named {name} exists already.")
        depth = parent.depth + 1
        if depth > self.settings.multi_agent_max_depth:
            raise ActionRefused(
                f"spawn_agent: {name} would be at depth {depth}; this server allows "
                f"{self.settings.multi_agent_max_depth} (AGENTIC_MULTI_AGENT_MAX_DEPTH)."
            )
        if self.spawned >= self.settings.multi_agent_max_agents:
            raise ActionRefused(
                f"spawn_agent: this response has created {self.spawned} subagents, the "
                "most this server allows (AGENTIC_MULTI_AGENT_MAX_AGENTS)."
            )
        child = Agent(name=name, parent=parent, depth=depth, items=[], last_task=spawn.message)
        child.parent_prompt = parent.last_prompt
        # The parent's prompt as its last round sent it, then the task. Its stored items
        # start with the parent's (they begin with the history the tree continued); when
        # the parent compacted, what it sends starts with the parent's window instead.
        task = user_message(task_message(child, spawn.message))
        child.items = [*parent.items[: parent.sent_end], task]
        if parent.window is not None:
            child.window, child.window_end = [*parent.sent, task], len(child.items)
        child.started_with = len(child.items)
        child.answered = child.started_with - 1
        child.response_id = mint_id(IdKind.RESPONSE)
        self.spawned += 1
        self.add(child)
        self.publish(agent_message_item(parent.name, name, spawn.message))
        self.start(child)
        return _json({"agent_name": name, "status": child.status, "response_id": child.response_id})

    async def _wait(self, agent: Agent, wait: Wait) -> str:
        if wait.targets is None:
            targets = [a for a in self.agents.values() if a.parent is agent]
        else:
            targets = [self._find(resolve(t, agent.name), "wait_agent") for t in wait.targets]
        if agent in targets:
            raise ActionRefused("wait_agent: an agent cannot wait for itself.")
        running = [a.finished.wait() for a in targets if a.status == "running"]
        timed_out = False
        if running:
            timeout = None if wait.timeout_ms is None else wait.timeout_ms / 1000
            waits = [asyncio.ensure_future(w) for w in running]
            with self.waiting(agent):
                _, pending = await asyncio.wait(waits, timeout=timeout)
            for left in pending:
                left.cancel()
            timed_out = bool(pending)
        return _json({"agents": [target.summary() for target in targets], "timed_out": timed_out})

    def _send(self, agent: Agent, message: Message) -> str:
        target = self._find(resolve(message.target, agent.name), "send_message")
        if target is agent:
            raise ActionRefused("send_message: an agent cannot message itself.")
        target.inbox.append(f"Message from {agent.name}:\n{message.message}")
        self.publish(agent_message_item(agent.name, target.name, message.message))
        return _json({"agent_name": target.name, "delivered": True, "status": target.status})

    def _followup(self, agent: Agent, message: Message) -> str:
        target = self._find(resolve(message.target, agent.name), "followup_task")
        if target.parent is None:
            raise ActionRefused("followup_task: the root agent takes no follow-up tasks.")
        if target is agent:
            raise ActionRefused("followup_task: an agent cannot give itself a task.")
        target.last_task = message.message
        self.publish(agent_message_item(agent.name, target.name, message.message))
        if target.status == "running":
            target.inbox.append(f"Follow-up task from {agent.name}:\n{message.message}")
            return _json({"agent_name": target.name, "status": "running", "queued": True})
        target.items.append(user_message(f"Follow-up task from {agent.name}:\n{message.message}"))
        target.status, target.final_text, target.error = "running", None, None
        target.finished.clear()
        self.start(target)
        return _json({"agent_name": target.name, "status": "running", "queued": False})

    async def _interrupt(self, agent: Agent, target_name: Target) -> str:
        target = self._find(resolve(target_name.target, agent.name), "interrupt_agent")
        if target.parent is None or target is agent:
            raise ActionRefused("interrupt_agent: only another subagent can be interrupted.")
        previous = target.status
        await self.stop(target)
        return _json({"agent_name": target.name, "previous_status": previous})

    def _list(self, listing: ListAgents) -> str:
        prefix = listing.path_prefix
        agents = [
            a.summary()
            for a in self.agents.values()
            if prefix is None or a.name.startswith(prefix.rstrip("/"))
        ]
        return _json({"agents": agents})

    def _find(self, name: str, action: str) -> Agent:
        agent = self.agents.get(name)
        if agent is None:
            raise ActionRefused(f"{action}: there is no agent named {name}.")
        return agent

    # --- stopping ----------------------------------------------------------------------

    async def stop(self, agent: Agent) -> None:
        """Interrupts ``agent`` and its descendants (their tasks cancelled and awaited)."""
        for other in list(self.agents.values()):
            if other is not agent and other.name.startswith(agent.name + "/"):
                await self._cancel(other)
        await self._cancel(agent)

    async def _cancel(self, agent: Agent) -> None:
        task = agent.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if agent.status == "running":
            agent.status = "interrupted"
            agent.finished.set()

    async def settle(self) -> None:
        """Waits until no subagent is running (one may start another while it runs)."""
        while running := [a for a in self.subagents() if a.status == "running"]:
            await asyncio.gather(*(agent.finished.wait() for agent in running))

    async def stop_all(self) -> None:
        for agent in list(self.subagents()):
            await self._cancel(agent)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
