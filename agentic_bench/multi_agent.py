"""``bench agents --multi-agent``: leads that spawn subagents over a shared prefix.

L leads run at once against our server's hosted multi-agent beta
(``POST /v1/responses?beta=true``). Every lead shares one system prompt; each of its K
turns is one multi-agent response that continues the previous one
(``previous_response_id``) and spawns one subagent (the turn's first round is made to call
``spawn_agent``; the agents then run freely), so each subagent's prompt starts with the
whole history of its lead so far. Between turns the lead pauses as if a tool ran
(``tool_seconds``), the pause in which a prefix may be evicted.

After each turn it reads the server's own accounts (admin key): every agent's rounds
(``/admin/v1/responses/{id}/agents``: input, cached and output tokens, and each subagent's
first request against its parent's prefix: shared tokens, expected cached, measured
cached) and the lead's continuation account (``/token_account``: expected and measured
cached tokens of the lead's first round against its previous turn). The summary reports
cached / input tokens across the tree, expected / measured on every subagent's first
request, and how many of those reused every full block of the parent's prefix.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from agentic_bench.client import BenchError, Target, filler_text

BETA = "responses_multi_agent=v1"


@dataclass(frozen=True)
class MultiAgentConfig:
    model: str
    admin_key: str
    leads: int = 2
    turns: int = 3
    tool_seconds: float = 1.0
    system_words: int = 300
    task_words: int = 40
    max_output_tokens: int = 160
    temperature: float = 0.0
    max_concurrent_subagents: int = 2
    nonce: str = ""

    @property
    def run_tag(self) -> str:
        return self.nonce or "ma"


def _body(config: MultiAgentConfig, lead: int, turn: int, previous: str | None) -> dict[str, Any]:
    shared = filler_text(config.system_words, f"{config.run_tag} team handbook")
    task = filler_text(config.task_words, f"bench {config.run_tag} a{lead} t{turn}")
    body: dict[str, Any] = {
        "model": config.model,
        "instructions": f"You lead a team of helpers. Delegate each step, then answer. {shared}",
        "input": f"Step {turn} of the work: {task}",
        "tool_choice": {"type": "function", "name": "spawn_agent"},
        "temperature": config.temperature,
        "max_output_tokens": config.max_output_tokens,
        "multi_agent": {
            "enabled": True,
            "max_concurrent_subagents": config.max_concurrent_subagents,
        },
    }
    if previous is not None:
        body["previous_response_id"] = previous
    return body


async def _admin(http: httpx.AsyncClient, config: MultiAgentConfig, path: str) -> Any:
    answer = await http.get(
        f"/admin/v1/{path}", headers={"authorization": f"Bearer {config.admin_key}"}
    )
    if answer.status_code != 200:
        raise BenchError(f"admin {path} answered {answer.status_code}: {answer.text[:200]}")
    return answer.json()


async def run_multi_agent(target: Target, config: MultiAgentConfig) -> list[dict[str, Any]]:
    """One row per lead turn: its tree's tokens and its subagents' first requests."""
    rows: list[dict[str, Any]] = []
    http = target.http

    async def lead(index: int) -> None:
        previous: str | None = None
        for turn in range(config.turns):
            started = time.perf_counter()
            answer = await http.post(
                "/v1/responses",
                params={"beta": "true"},
                headers={"OpenAI-Beta": BETA},
                json=_body(config, index, turn, previous),
            )
            latency = time.perf_counter() - started
            if answer.status_code != 200:
                raise BenchError(
                    f"lead {index} turn {turn}: {answer.status_code} {answer.text[:300]}"
                )
            response = answer.json()
            previous = response["id"]
            agents = (await _admin(http, config, f"responses/{previous}/agents"))["agents"]
            account = (await _admin(http, config, f"responses/{previous}/token_account"))["account"]
            firsts = [a["first_request"] for a in agents if a["first_request"] is not None]
            rows.append(
                {
                    "lead": index,
                    "turn": turn,
                    "status": response["status"],
                    "latency_s": round(latency, 3),
                    "agents": len(agents),
                    "subagents": sum(1 for a in agents if a["parent_agent"] is not None),
                    "tree_input_tokens": sum(a["input_tokens"] for a in agents),
                    "tree_cached_tokens": sum(a["cached_tokens"] for a in agents),
                    "lead_expected_cached": (account or {}).get("expected_cached"),
                    "lead_measured_cached": (account or {}).get("measured_cached"),
                    "first_requests": len(firsts),
                    "first_expected_cached": sum(f["expected_cached"] for f in firsts),
                    "first_measured_cached": sum(f["measured_cached"] for f in firsts),
                    "first_hits": sum(1 for f in firsts if f["hit"]),
                }
            )
            await asyncio.sleep(config.tool_seconds)

    await asyncio.gather(*(lead(index) for index in range(config.leads)))
    rows.sort(key=lambda row: (row["lead"], row["turn"]))
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(row[key] or 0) for row in rows)

    later = [row for row in rows if row["turn"] > 0]
    return {
        "turns": len(rows),
        "subagents": total("subagents"),
        "tree_input_tokens": total("tree_input_tokens"),
        "tree_cached_tokens": total("tree_cached_tokens"),
        "subagent_first_requests": total("first_requests"),
        "subagent_first_expected_cached": total("first_expected_cached"),
        "subagent_first_measured_cached": total("first_measured_cached"),
        "subagent_first_hits": total("first_hits"),
        "lead_continuation_expected_cached": sum(
            int(row["lead_expected_cached"] or 0) for row in later
        ),
        "lead_continuation_measured_cached": sum(
            int(row["lead_measured_cached"] or 0) for row in later
        ),
    }


def table(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    """The run as markdown: one line per lead turn, then the totals."""
    lines = [
        "| lead | turn | subagents | tree cached / input | lead cont. measured / expected "
        "| subagent first requests: measured / expected (hits) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['lead']} | {row['turn']} | {row['subagents']} | "
            f"{row['tree_cached_tokens']} / {row['tree_input_tokens']} | "
            f"{row['lead_measured_cached']} / {row['lead_expected_cached']} | "
            f"{row['first_measured_cached']} / {row['first_expected_cached']} "
            f"({row['first_hits']}/{row['first_requests']}) |"
        )
    s = summary
    lines.append(
        f"| all | {s['turns']} | {s['subagents']} | "
        f"{s['tree_cached_tokens']} / {s['tree_input_tokens']} | "
        f"{s['lead_continuation_measured_cached']} / {s['lead_continuation_expected_cached']} | "
        f"{s['subagent_first_measured_cached']} / {s['subagent_first_expected_cached']} "
        f"({s['subagent_first_hits']}/{s['subagent_first_requests']}) |"
    )
    return "\n".join(lines) + "\n"
