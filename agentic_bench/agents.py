"""``bench agents``: concurrent simulated agents in tool loops, as a router sees them.

N agents run at once against one Responses endpoint. Every agent shares one system prompt
and one set of tool definitions (a prefix common to all sessions), sends its own task, and
then loops for K model turns: each turn ends in a function call (forced with
``tool_choice`` unless told otherwise), the agent "runs the tool" for a configurable time —
the pause during which the session's KV blocks may be evicted or its replica forgotten —
answers with ``function_call_output`` and continues. Turns chain by
``previous_response_id`` or a ``conversation`` on a stateful server, or carry the history
themselves (``history``: a raw upstream or a router, with ``store: false``).

Per turn it records the usage (input, cached), the block-aligned expected reuse (every full
block of the previous turn's prompt), TTFT when streaming, latency, the serving replica
when a response header names it, and, when asked, the server's own token account. Every
text, pause and choice comes from ``seed``: two runs with one seed send the same requests
at the same offsets; ``nonce`` changes only the shared prompt's first words, so a rerun
starts cold on replicas that still hold the last run's blocks.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_bench.client import (
    BenchError,
    Target,
    TurnResult,
    filler_text,
    message,
    replayable,
)
from agentic_bench.stats import ideal_cached, ratio, summary, upper_cached

Chain = Literal["previous_response_id", "conversation", "history"]
ToolChoice = Literal["named", "required", "auto"]

TOOL_NAMES = ("read_file", "run_tests", "search_code", "edit_file", "list_dir", "git_diff")
# Every request's newest item starts with this tag, so whoever sees the request (a replica,
# a proxy in front of one) can say which agent and turn it was.
TAG = re.compile(r"\[bench (\S+) a(\d+) t(\d+)\]")


@dataclass(frozen=True)
class AgentsConfig:
    model: str
    agents: int = 4
    turns: int = 4
    chain: Chain = "previous_response_id"
    stream: bool = False
    # Seconds the client "runs the tool" before answering a call, and thinks before every
    # request; each drawn within +-jitter (a fraction) of its value.
    tool_seconds: float = 2.0
    think_seconds: float = 0.1
    jitter: float = 0.25
    # Agents start spread evenly over this many seconds.
    ramp_seconds: float = 0.0
    tool_choice: ToolChoice = "named"
    tools: int = 3
    system_words: int = 300
    task_words: int = 60
    tool_output_words: int = 40
    max_output_tokens: int = 32
    temperature: float = 0.0
    block_size: int = 32
    seed: int = 0
    nonce: str = ""
    # Send prompt_cache_key = bench-{run_tag}-a{index}: sessions that a rerun reproduces
    # (a server that mints item ids derives a content session from them, which differs).
    session_key: bool = False
    # Stateful targets: one API key per agent, cycled. ``history``: the salt to send.
    api_keys: Sequence[str | None] = (None,)
    salt: str | None = None
    # A failed turn (transport error, 5xx) is retried this often (same input) before the
    # agent gives up; a 4xx ends the agent's session at once.
    retries: int = 0
    retry_delay: float = 1.0
    # GET path of the server's token account of a response (``{id}``), read with
    # ``admin_key`` after every turn when both are given; missing accounts are skipped.
    account_path: str | None = None
    admin_key: str | None = None

    @property
    def run_tag(self) -> str:
        return self.nonce or f"s{self.seed}"


def shared_instructions(config: AgentsConfig) -> str:
    return (
        f"[{config.run_tag}] You are a coding agent. Work step by step and use exactly one "
        "tool per turn. " + filler_text(config.system_words, f"system-{config.seed}")
    )


def shared_tools(config: AgentsConfig) -> list[dict[str, Any]]:
    names = [
        TOOL_NAMES[i % len(TOOL_NAMES)] + ("" if i < len(TOOL_NAMES) else f"_{i}")
        for i in range(config.tools)
    ]
    return [
        {
            "type": "function",
            "name": name,
            "description": f"{name.replace('_', ' ')} in the repository under work.",
            # A closed, tiny schema: a forced call is short and valid even from a
            # model that writes nonsense (decoding is constrained to it).
            "parameters": {
                "type": "object",
                "properties": {"target": {"type": "string", "enum": ["src", "tests", "docs"]}},
                "required": ["target"],
                "additionalProperties": False,
            },
            "strict": True,
        }
        for name in names
    ]


def tool_choice(config: AgentsConfig, tools: list[dict[str, Any]]) -> str | dict[str, Any]:
    # One choice for the whole run: a choice that changed from turn to turn could change
    # the rendered prompt, and with it every session's reusable prefix.
    if config.tool_choice == "named":
        return {"type": "function", "name": tools[0]["name"]}
    return config.tool_choice


def tag(config: AgentsConfig, agent: int, turn: int) -> str:
    return f"[bench {config.run_tag} a{agent} t{turn}]"


@dataclass
class Agent:
    """One session: what it sends next and what it got back."""

    index: int
    config: AgentsConfig
    rng: random.Random
    api_key: str | None
    conversation: str | None = None
    last: TurnResult | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def pause(self, seconds: float) -> float:
        spread = self.config.jitter
        return max(0.0, seconds * self.rng.uniform(1 - spread, 1 + spread))

    def new_input(self, turn: int) -> list[dict[str, Any]]:
        config = self.config
        head = tag(config, self.index, turn)
        if turn == 1:
            task = filler_text(config.task_words, f"task-{config.seed}-{self.index}")
            return [message("user", f"{head} Task {self.index}: {task}")]
        assert self.last is not None
        calls = [item for item in self.last.output if item.get("type") == "function_call"]
        if not calls:
            # The model answered in text (tool_choice auto, or a model that cannot call):
            # the client still works for the pause and reports, so prompts grow as in a
            # tool loop whatever the model did.
            report = filler_text(config.tool_output_words, f"out-{config.seed}-{self.index}-{turn}")
            return [message("user", f"{head} No tool was called; the step ran anyway: {report}")]
        return [
            {
                "type": "function_call_output",
                "call_id": call.get("call_id"),
                "output": f"{head} "
                + filler_text(
                    config.tool_output_words, f"out-{config.seed}-{self.index}-{turn}-{n}"
                ),
            }
            for n, call in enumerate(calls)
        ]

    def body(self, base: dict[str, Any], new: list[dict[str, Any]]) -> dict[str, Any]:
        body = dict(base)
        chain = self.config.chain
        if chain == "history":
            body["store"] = False
            if self.config.salt:
                body["cache_salt"] = self.config.salt
            body["input"] = [*self.history, *new]
            return body
        body["input"] = new
        if self.config.session_key:
            body["prompt_cache_key"] = f"bench-{self.config.run_tag}-a{self.index}"
        if chain == "conversation":
            body["conversation"] = self.conversation
        elif self.last is not None:
            body["previous_response_id"] = self.last.id
        return body

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        if self.config.chain == "history":
            # What our server sends for affinity; a raw upstream gets it from the client.
            headers["x-session-id"] = f"bench-{self.config.run_tag}-a{self.index}"
        return headers

    def advance(self, new: list[dict[str, Any]], result: TurnResult) -> None:
        if self.config.chain == "history":
            self.history += [*new, *replayable(result.output)]
        self.last = result


async def run_agents(target: Target, config: AgentsConfig) -> list[dict[str, Any]]:
    """Runs every agent's session to its end; one row per attempted turn, in time order."""
    tools = shared_tools(config)
    base: dict[str, Any] = {
        "model": config.model,
        "instructions": shared_instructions(config),
        "tools": tools,
        "tool_choice": tool_choice(config, tools),
        "max_output_tokens": config.max_output_tokens,
        "temperature": config.temperature,
    }
    started = time.perf_counter()
    agents = [
        Agent(
            index,
            config,
            random.Random(f"agents/{config.seed}/{index}"),
            config.api_keys[index % len(config.api_keys)],
        )
        for index in range(config.agents)
    ]
    results = await asyncio.gather(*(_session(target, agent, base, started) for agent in agents))
    rows = [row for rows in results for row in rows]
    return sorted(rows, key=lambda row: (float(row["start_s"]), int(row["agent"])))


async def _session(
    target: Target, agent: Agent, base: dict[str, Any], started: float
) -> list[dict[str, Any]]:
    config = agent.config
    rows: list[dict[str, Any]] = []
    await asyncio.sleep(config.ramp_seconds * agent.index / max(config.agents, 1))
    if config.chain == "conversation":
        agent.conversation = await _open_conversation(target, agent)
    pause = 0.0
    for turn in range(1, config.turns + 1):
        if turn > 1:
            pause = agent.pause(config.tool_seconds)
            await asyncio.sleep(pause)
        await asyncio.sleep(agent.pause(config.think_seconds))
        new = agent.new_input(turn)
        body = agent.body(base, new)
        for attempt in range(config.retries + 1):
            begun = time.perf_counter() - started
            try:
                if config.stream:
                    result = await target.create_streamed(body, agent.headers())
                else:
                    result = await target.create(body, agent.headers())
            except BenchError as exc:
                rows.append(_failed_row(agent, turn, attempt, begun, started, pause, exc))
                # A refusal of the request itself (4xx) would be refused again.
                refused = exc.status is not None and 400 <= exc.status < 500
                if attempt == config.retries or refused:
                    return rows
                await asyncio.sleep(config.retry_delay)
                continue
            row = turn_row(agent, turn, attempt, result, begun, time.perf_counter() - started)
            row["pause_s"] = pause
            row.update(await _account(target, config, result.id))
            rows.append(row)
            agent.advance(new, result)
            break
    return rows


async def _open_conversation(target: Target, agent: Agent) -> str:
    headers = {"authorization": f"Bearer {agent.api_key}"} if agent.api_key else None
    try:
        response = await target.http.post("/v1/conversations", json={}, headers=headers)
    except Exception as exc:
        raise BenchError(f"{target.name}: POST /v1/conversations: {exc}") from exc
    if response.status_code != 200:
        raise BenchError(
            f"{target.name}: POST /v1/conversations answered {response.status_code}: "
            f"{response.text[:300]}"
        )
    return str(response.json()["id"])


def turn_row(
    agent: Agent, turn: int, attempt: int, result: TurnResult, begun: float, ended: float
) -> dict[str, Any]:
    block = agent.config.block_size
    previous = agent.last
    expected = upper = None
    if previous is not None:
        expected = ideal_cached(previous.input_tokens, result.input_tokens, block)
        upper = upper_cached(
            previous.input_tokens, previous.output_tokens, result.input_tokens, block
        )
    prev_replica = previous.replica if previous is not None else None
    calls = sum(1 for item in result.output if item.get("type") == "function_call")
    return {
        "agent": agent.index,
        "turn": turn,
        "attempt": attempt,
        "status": result.status,
        "error": None,
        "start_s": begun,
        "end_s": ended,
        "pause_s": 0.0,
        "input_tokens": result.input_tokens,
        "cached_tokens": result.cached_tokens,
        "output_tokens": result.output_tokens,
        "expected_cached_tokens": expected,
        "upper_cached_tokens": upper,
        "hit_ratio": ratio(result.cached_tokens, result.input_tokens),
        "cached_over_expected": ratio(result.cached_tokens, expected) if expected else None,
        "warm": (result.cached_tokens >= expected) if expected else None,
        "ttft_s": result.ttft,
        "latency_s": result.latency,
        "tool_calls": calls,
        "replica": result.replica,
        "prev_replica": prev_replica,
        "same_replica": (
            (result.replica == prev_replica) if result.replica and prev_replica else None
        ),
        "response_id": result.id,
    }


def _failed_row(
    agent: Agent,
    turn: int,
    attempt: int,
    begun: float,
    started: float,
    pause: float,
    exc: BenchError,
) -> dict[str, Any]:
    return {
        "agent": agent.index,
        "turn": turn,
        "attempt": attempt,
        "status": "error",
        "error": str(exc)[:300],
        "start_s": begun,
        "end_s": time.perf_counter() - started,
        "pause_s": pause,
    }


async def _account(target: Target, config: AgentsConfig, response_id: str) -> dict[str, Any]:
    """The server's token account of one response, flattened to ``account_*`` columns."""
    if not config.account_path or not config.admin_key:
        return {}
    try:
        response = await target.http.get(
            config.account_path.format(id=response_id),
            headers={"authorization": f"Bearer {config.admin_key}"},
        )
    except Exception:
        return {}
    if response.status_code != 200:
        return {}
    data = response.json()
    return {
        f"account_{key}": value
        for key, value in (data.items() if isinstance(data, dict) else ())
        if isinstance(value, str | int | float | bool) or value is None
    }


def summarize(rows: Sequence[dict[str, Any]], config: AgentsConfig) -> dict[str, Any]:
    """The run's figures. A continuation is a turn after the first that succeeded; it
    "returned warm" when it cached at least every full block of the previous prompt. A
    continuation served by its previous turn's replica that still missed is a paused
    session evicted meanwhile (counted only when replicas are reported)."""
    served = [r for r in rows if r["status"] != "error"]
    firsts = [r for r in served if r["turn"] == 1]
    continuations = [r for r in served if r["turn"] > 1 and r.get("expected_cached_tokens")]
    known = [r for r in continuations if r.get("same_replica") is not None]
    expected = sum(int(r["expected_cached_tokens"]) for r in continuations)
    cached = sum(int(r["cached_tokens"]) for r in continuations)
    sessions_done = {r["agent"] for r in served if r["turn"] == config.turns}
    return {
        "agents": config.agents,
        "turns_per_agent": config.turns,
        "turns_served": len(served),
        "failed_attempts": sum(1 for r in rows if r["status"] == "error"),
        "sessions_completed": len(sessions_done),
        "turns_without_tool_call": sum(1 for r in served if not r.get("tool_calls")),
        "first_turns_with_shared_prefix_hit": sum(1 for r in firsts if r["cached_tokens"]),
        "continuations": len(continuations),
        "warm_returns": sum(1 for r in continuations if r["warm"]),
        "hit_ratio": summary([float(r["hit_ratio"]) for r in continuations]),
        "cached_over_expected": ratio(cached, expected),
        "cached_tokens": cached,
        "expected_cached_tokens": expected,
        "ttft_first_s": summary([float(r["ttft_s"]) for r in firsts if r.get("ttft_s")]),
        "ttft_continuation_s": summary(
            [float(r["ttft_s"]) for r in continuations if r.get("ttft_s")]
        ),
        "latency_first_s": summary([float(r["latency_s"]) for r in firsts]),
        "latency_continuation_s": summary([float(r["latency_s"]) for r in continuations]),
        "continuations_with_replica_info": len(known),
        "moved_replica": sum(1 for r in known if not r["same_replica"]) if known else None,
        "evicted_while_paused": (
            sum(1 for r in known if r["same_replica"] and not r["warm"]) if known else None
        ),
    }
