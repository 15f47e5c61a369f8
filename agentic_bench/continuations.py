"""``bench continuations``: cold turn + continuation pairs; how much of the prefix is reused.

Each pair starts a new chain with a unique long prompt (cold), then continues it with a
short follow-up: through a stateful server with ``previous_response_id``, or (``direct``)
straight to an upstream with the history carried by the client. Per pair it records the
usage numbers, the hit ratio of the continuation, the block-aligned ideal (every full
block of the cold turn's prompt) and an upper bound (also the cold turn's generated
tokens, reached when their text re-tokenizes to the same ids), latency, and the serving
replica where the upstream or router reports one in a response header.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_api.charts import bar_chart, line_chart, stack_vertically
from agentic_bench.client import Target, TurnResult, filler_text, message, replayable
from agentic_bench.output import write_results
from agentic_bench.stats import ideal_cached, ratio, summary, upper_cached


@dataclass(frozen=True)
class ContinuationConfig:
    model: str
    pairs: int = 10
    prompt_words: int = 600
    followup_words: int = 40
    max_output_tokens: int = 16
    temperature: float = 0.0
    block_size: int = 32
    instructions: str = "You are a careful coding assistant."
    # Direct mode only (a stateful server mints its own per tenant): one per pair, cycled.
    salts: Sequence[str] = ()
    # A stateful target: one API key per pair, cycled (several tenants). Ignored direct.
    api_keys: Sequence[str | None] = (None,)
    # Direct mode: send an X-Session-ID per pair, as our server does, for affinity routers.
    session_header: bool = True
    # Our server's admin key: each continuation's token account (why tokens were lost) is
    # read from /admin/v1/responses/{id}/token_account.
    admin_key: str | None = None


async def run_pair(
    target: Target, config: ContinuationConfig, index: int, nonce: str
) -> dict[str, Any]:
    seed = f"{nonce}-{index}"
    body: dict[str, Any] = {
        "model": config.model,
        # The seed leads the prompt, so nothing of a cold turn is cached (not even the
        # instructions, which every pair shares otherwise). Resent with the continuation:
        # previous_response_id does not carry instructions over.
        "instructions": f"[{seed}] {config.instructions}",
        "max_output_tokens": config.max_output_tokens,
        "temperature": config.temperature,
    }
    headers: dict[str, str] = {}
    cold_input = [message("user", filler_text(config.prompt_words, seed))]
    followup = [message("user", filler_text(config.followup_words, f"{seed}-next"))]
    if target.stateful:
        key = config.api_keys[index % len(config.api_keys)]
        if key:
            headers["authorization"] = f"Bearer {key}"
    else:
        body["store"] = False
        if config.salts:
            body["cache_salt"] = config.salts[index % len(config.salts)]
        if config.session_header:
            headers["x-session-id"] = f"bench-{seed}"
    cold = await target.create({**body, "input": cold_input}, headers)
    if target.stateful:
        warm_body = {**body, "input": followup, "previous_response_id": cold.id}
    else:
        warm_body = {**body, "input": [*cold_input, *replayable(cold.output), *followup]}
    warm = await target.create(warm_body, headers)
    row = pair_row(index, cold, warm, config.block_size)
    if config.admin_key and target.stateful:
        row.update(account_columns(await token_account(target, config.admin_key, warm.id)))
    return row


async def token_account(target: Target, admin_key: str, response_id: str) -> dict[str, Any] | None:
    answer = await target.http.get(
        f"/admin/v1/responses/{response_id}/token_account",
        headers={"authorization": f"Bearer {admin_key}"},
    )
    if answer.status_code != 200:
        return None
    account = answer.json().get("account")
    return account if isinstance(account, dict) else None


def account_columns(account: dict[str, Any] | None) -> dict[str, Any]:
    """The continuation's token account, flattened for the CSV (``lost_<cause>``)."""
    if account is None:
        return {"token_status": None}
    columns: dict[str, Any] = {
        "token_status": account.get("status"),
        "token_cause": account.get("cause"),
        "reusable_tokens": account.get("reusable_tokens"),
        "expected_cached_tokens": account.get("expected_cached"),
        "divergence_offset": (account.get("divergence") or {}).get("offset"),
    }
    for cause, tokens in (account.get("lost") or {}).items():
        columns[f"lost_{cause}"] = tokens
    return columns


def pair_row(index: int, cold: TurnResult, warm: TurnResult, block_size: int) -> dict[str, Any]:
    ideal = ideal_cached(cold.input_tokens, warm.input_tokens, block_size)
    upper = upper_cached(cold.input_tokens, cold.output_tokens, warm.input_tokens, block_size)
    return {
        "pair": index,
        "cold_input_tokens": cold.input_tokens,
        "cold_cached_tokens": cold.cached_tokens,
        "cold_output_tokens": cold.output_tokens,
        "cold_latency_s": cold.latency,
        "cold_replica": cold.replica,
        "input_tokens": warm.input_tokens,
        "cached_tokens": warm.cached_tokens,
        "hit_ratio": ratio(warm.cached_tokens, warm.input_tokens),
        "ideal_cached_tokens": ideal,
        "upper_cached_tokens": upper,
        "measured_over_ideal": ratio(warm.cached_tokens, ideal),
        # The token-exact ideal: what a continuation whose prompt starts with exactly the
        # cold turn's prompt and generated tokens would be served.
        "measured_over_token_exact": ratio(warm.cached_tokens, upper),
        "latency_s": warm.latency,
        "replica": warm.replica,
        "same_replica": (cold.replica == warm.replica) if cold.replica and warm.replica else None,
    }


async def run_continuations(
    target: Target, config: ContinuationConfig, *, concurrency: int = 1
) -> list[dict[str, Any]]:
    nonce = uuid.uuid4().hex[:10]
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(index: int) -> dict[str, Any]:
        async with gate:
            return await run_pair(target, config, index, nonce)

    rows = await asyncio.gather(*(one(i) for i in range(config.pairs)))
    return sorted(rows, key=lambda row: int(row["pair"]))


def summarize(rows: Sequence[dict[str, Any]], config: ContinuationConfig) -> dict[str, Any]:
    ratios = [float(r["hit_ratio"]) for r in rows]
    versus_ideal = [float(r["measured_over_ideal"]) for r in rows if r["ideal_cached_tokens"]]
    replicas = [r["same_replica"] for r in rows if r["same_replica"] is not None]
    versus_exact = [float(r["measured_over_token_exact"]) for r in rows if r["upper_cached_tokens"]]
    lost: dict[str, int] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith("lost_") and isinstance(value, int):
                lost[key.removeprefix("lost_")] = lost.get(key.removeprefix("lost_"), 0) + value
    accounted = [r for r in rows if r.get("token_status") is not None]
    return {
        "pairs": len(rows),
        "block_size": config.block_size,
        "hit_ratio": summary(ratios),
        "measured_over_ideal": summary(versus_ideal),
        "measured_over_token_exact": summary(versus_exact),
        "measured_cached_tokens": sum(int(r["cached_tokens"]) for r in rows),
        "token_exact_ideal_tokens": sum(int(r["upper_cached_tokens"]) for r in rows),
        "token_accounts": {
            "pairs": len(accounted),
            "token_exact": sum(1 for r in accounted if r["token_status"] == "exact"),
            "expected_cached_tokens": sum(
                int(r.get("expected_cached_tokens") or 0) for r in accounted
            ),
            "lost_tokens_by_cause": dict(sorted(lost.items())),
        }
        if accounted
        else None,
        "pairs_at_or_above_ideal": sum(
            1 for r in rows if r["cached_tokens"] >= r["ideal_cached_tokens"]
        ),
        "pairs_cold_cache_hits": sum(1 for r in rows if r["cold_cached_tokens"]),
        "cold_latency_s": summary([float(r["cold_latency_s"]) for r in rows]),
        "continuation_latency_s": summary([float(r["latency_s"]) for r in rows]),
        "same_replica_pairs": sum(1 for same in replicas if same) if replicas else None,
        "pairs_with_replica_info": len(replicas),
    }


def chart(rows: Sequence[dict[str, Any]], title: str) -> str:
    pairs = [float(r["pair"]) for r in rows]
    return stack_vertically(
        title,
        [
            bar_chart(
                "continuation prefix-cache hit ratio (cached / input tokens)",
                [f"{pair:g}" for pair in pairs],
                {
                    "hit ratio": [float(r["hit_ratio"]) for r in rows],
                    "ideal ratio": [
                        ratio(r["ideal_cached_tokens"], r["input_tokens"]) for r in rows
                    ],
                },
                x_title="pair",
                y_title="ratio",
                y_range=(0.0, 1.0),
            ),
            line_chart(
                "latency per request",
                {
                    "cold turn": list(
                        zip(pairs, [float(r["cold_latency_s"]) for r in rows], strict=True)
                    ),
                    "continuation": list(
                        zip(pairs, [float(r["latency_s"]) for r in rows], strict=True)
                    ),
                },
                x_title="pair",
                y_title="seconds",
            ),
        ],
    )


def write_outputs(
    out: Path, name: str, rows: Sequence[dict[str, Any]], summary_data: dict[str, Any]
) -> list[Path]:
    return write_results(out, name, rows, summary_data, chart(rows, f"bench continuations: {name}"))
