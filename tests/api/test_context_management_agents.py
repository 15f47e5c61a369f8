"""A long OpenAI Agents SDK run with ``context_management`` compaction at a small
threshold (SQLite and PostgreSQL): 40 turns chained by ``previous_response_id``, each
compacting exactly when its input passes the threshold, and the stored chain continuing
from the latest compaction afterwards."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, ModelSettings, RunConfig, Runner
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import ResponseCompactionItem

from agentic_api.turns.kinds.threshold_compaction import BYTES_PER_TOKEN
from agentic_api.turns.prepare.summary_request import SUMMARY_REQUEST
from agentic_api.wire.summary import SUMMARY_HEADER
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import SimServer

TURNS = 40
THRESHOLD = 1000
FILLER = "Log the next delivery with its port, its date and its weight in tonnes. "


def _asks_for_summary(body: dict[str, object]) -> bool:
    items = body.get("input")
    if not isinstance(items, list) or not items:
        return False
    parts = items[-1].get("content")
    return isinstance(parts, list) and parts[0].get("text") == SUMMARY_REQUEST


async def _run(base_url: str, api_key: str) -> tuple[list[str], int]:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=20)
    agent = Agent(
        name="logger",
        instructions="Keep a log of deliveries.",
        model=OpenAIResponsesModel(model="sim-model", openai_client=client),
        model_settings=ModelSettings(
            store=True,
            context_management=[{"type": "compaction", "compact_threshold": THRESHOLD}],
        ),
    )
    config = RunConfig(tracing_disabled=True)
    previous: str | None = None
    ids: list[str] = []
    compactions = 0
    for turn in range(TURNS):
        result = await Runner.run(
            agent, f"Delivery {turn}. {FILLER}", previous_response_id=previous, run_config=config
        )
        (raw,) = result.raw_responses
        compactions += sum(isinstance(item, ResponseCompactionItem) for item in raw.output)
        previous = result.last_response_id
        assert previous is not None
        ids.append(previous)
    await client.close()
    return ids, compactions


def test_forty_agent_turns_compact_when_they_pass_the_threshold(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, client: OpenAI
) -> None:
    ids, compactions = asyncio.run(_run(f"{server.url}/v1", tenant.api_key))
    calls = sim.requests("/v1/responses")
    summarized = {index for index, call in enumerate(calls) if _asks_for_summary(call.json)}
    # Each compaction was one summary request, then the answer: 40 answers in all.
    assert compactions == len(summarized) >= 3
    assert len(calls) == TURNS + compactions
    for index, call in enumerate(calls):
        estimate = len(call.body) // BYTES_PER_TOKEN
        if index in summarized:
            # It carries the turn's whole window, which passed the threshold.
            assert estimate > THRESHOLD
        elif index - 1 not in summarized:
            # A turn sent as is (no summary before it) was within the threshold.
            assert estimate <= THRESHOLD

    # The stored chain continues after the run, from the latest compaction's summary.
    last_compaction = next(
        item
        for response_id in reversed(ids)
        for item in client.responses.retrieve(response_id).output
        if isinstance(item, ResponseCompactionItem)
    )
    summary = SUMMARY_HEADER + last_compaction.encrypted_content
    follow = client.responses.create(
        model="sim-model",
        previous_response_id=ids[-1],
        input="How many deliveries?",
        context_management=[{"type": "compaction", "compact_threshold": THRESHOLD}],
    )
    assert follow.status == "completed"
    # With context_management, the window starts at the latest compaction's summary...
    sent = [_text(item) for item in sim.last("/v1/responses").json["input"]]
    assert sent[0] == summary and sent[-1] == "How many deliveries?"
    # ...and without it, the whole stored chain is replayed, all 40 turns' input.
    client.responses.create(model="sim-model", previous_response_id=ids[-1], input="And all?")
    replayed = [_text(item) for item in sim.last("/v1/responses").json["input"]]
    assert summary in replayed
    assert sum(text.startswith("Delivery ") for text in replayed) == TURNS


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return str(content)
