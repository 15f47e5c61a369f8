"""A 40-turn OpenAI Agents SDK run on SmolLM2 (a real model on CPU vLLM) with
``context_management`` compaction at a threshold that its 2,048-token window passes again
and again: a Runner with a function tool, each turn chained to the last by
``previous_response_id``, and the chain continued afterwards.

Every count checked is vLLM's own (``usage``, the stored token ids, ``/tokenize``): each
call made as is had at most the threshold; each that compacted had a window past it (its
summary round's prompt, less the one question that round adds); the turn after a
compaction was sent the compacted window (the summary at its head, a fraction of the
history's tokens), and its token account says ``context_compacted``; the stored chain
holds all 40 turns and continues without ``context_management`` too (the whole chain
replayed, up to where it no longer fits the model).

One backend (PostgreSQL, as in production): storage of compacted turns runs on both in
the api tier (``tests/api/test_context_management*.py``), and this run takes minutes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

import httpx
import pytest
from agents import (
    Agent,
    ModelSettings,
    RunConfig,
    Runner,
    RunResult,
    TResponseInputItem,
    function_tool,
)
from agents.items import ToolCallOutputItem
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI, BadRequestError, OpenAI
from openai.types.responses import Response, ResponseCompactionItem

from agentic_api.turns.prepare.summary_request import SUMMARY_REQUEST
from tests.conftest import RunningServer, app_server, make_database
from tests.real_vllm.conftest import RealVllm
from tests.support.admin_api import AdminApi
from tests.support.databases import drop_pg_database
from tests.support.tenants import TenantKeys, create_tenant

pytestmark = pytest.mark.real_vllm

TURNS = 40
# The smallest threshold accepted; SmolLM2 is served with a 2,048-token window, so a
# chain passes it every few turns and could not reach 40 turns without compacting.
THRESHOLD = 1000
# Small, so that 40 turns (and their summary rounds) fit in a few minutes on two cores, yet
# enough for a forced tool call in the hermes format (51 to 62 tokens measured).
MAX_OUTPUT = 96
INSTRUCTIONS = "You keep the harbour's delivery log. Log each delivery with the tool."
# An enum, not free text or a number: forced to a bounded value, a 135M model cannot
# loop inside the arguments (an integer ran to "1400000000..." past 200 tokens).
Ship = Literal["Aurora", "Boreas", "Calypso", "Dione", "Eos"]
SHIPS: tuple[str, ...] = get_args(Ship)
PORTS = ("Rotterdam", "Antwerp", "Hamburg", "Genoa", "Lisbon")


@dataclass
class Logbook:
    entries: list[str] = field(default_factory=list)


def _tool(book: Logbook) -> Any:
    @function_tool
    def log_delivery(ship: Ship) -> str:
        """Record one delivery in the harbour log.

        Args:
            ship: The ship that delivered.
        """
        book.entries.append(ship)
        return f"logged as entry {len(book.entries)}"

    return log_delivery


def _message(turn: int) -> str:
    ship, port = SHIPS[turn % len(SHIPS)], PORTS[turn % len(PORTS)]
    # About 100 tokens a turn with its tool call and output, so the window passes the
    # threshold every nine turns or so.
    return (
        f"Delivery {turn}: the ship {ship} arrived from {port} with {10 + turn} tonnes of "
        f"grain, unloaded at quay {turn % 7} before noon. The pilot boarded at the outer "
        f"buoy, the tug Hercules assisted the berthing, customs cleared the manifest within "
        f"the hour, and the harbour master noted calm water, a light westerly breeze and "
        f"good visibility for the whole of the manoeuvre."
    )


@dataclass(frozen=True)
class Run:
    # Each turn's one model call (a forced tool call), in order.
    responses: list[Response]
    # Each turn's tool output, sent with the next turn.
    outputs: list[list[TResponseInputItem]]
    seconds: float
    logged: list[str]


COMPACT: Any = [{"type": "compaction", "compact_threshold": THRESHOLD}]


def _agent(client: AsyncOpenAI, book: Logbook, model: str, *, compact: bool) -> Agent[None]:
    return Agent(
        name="harbour",
        instructions=INSTRUCTIONS,
        model=OpenAIResponsesModel(model=model, openai_client=client),
        tools=[_tool(book)],
        model_settings=ModelSettings(
            store=True,
            temperature=0,
            max_tokens=MAX_OUTPUT,
            # SmolLM2 calls a tool only when told to.
            tool_choice="log_delivery",
            context_management=COMPACT if compact else None,
        ),
        # The tool's result is the turn's answer, and it travels in the next turn's input.
        # A second model call per turn would write free text, and after a compaction
        # SmolLM2 copies its own summary's loop until max_output_tokens, which the SDK
        # raises on (ModelBehaviorError on an incomplete response).
        tool_use_behavior="stop_on_first_tool",
    )


def _tool_output(result: RunResult) -> list[TResponseInputItem]:
    """The turn's tool output, which the next turn sends."""
    outputs = [i.to_input_item() for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert len(outputs) == 1
    return outputs


async def _turn(
    agent: Agent[None], pending: list[TResponseInputItem], turn: int, previous: str | None
) -> RunResult:
    user: TResponseInputItem = {"role": "user", "content": _message(turn)}
    return await Runner.run(
        agent,
        [*pending, user],
        previous_response_id=previous,
        run_config=RunConfig(tracing_disabled=True),
    )


async def _run(base_url: str, api_key: str, model: str) -> Run:
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=300) as client:
        book = Logbook()
        return await _chain(_agent(client, book, model, compact=True), client, book)


async def _chain(agent: Agent[None], client: AsyncOpenAI, book: Logbook) -> Run:
    previous: str | None = None
    pending: list[TResponseInputItem] = []
    responses: list[Response] = []
    outputs: list[list[TResponseInputItem]] = []
    started = time.monotonic()
    for turn in range(TURNS):
        result = await _turn(agent, pending, turn, previous)
        (raw,) = result.raw_responses
        assert raw.response_id is not None and result.last_response_id == raw.response_id
        assert result.final_output == f"logged as entry {turn + 1}"
        pending = _tool_output(result)
        outputs.append(pending)
        responses.append(await client.responses.retrieve(raw.response_id))
        previous = raw.response_id
    seconds = time.monotonic() - started
    return Run(responses, outputs, seconds, book.entries)


async def _branch(base_url: str, api_key: str, model: str, run: Run, turn: int) -> str:
    """The turn after ``turn`` again, from the same stored response, without
    context_management: the id of its response."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=300) as client:
        agent = _agent(client, Logbook(), model, compact=False)
        result = await _turn(agent, run.outputs[turn], turn + 1, run.responses[turn].id)
    assert result.last_response_id is not None
    return result.last_response_id


def _tokens(smollm2: RealVllm, text: str) -> int:
    """How many tokens vLLM makes of ``text`` (no special tokens added)."""
    answer = httpx.post(
        f"{smollm2.url}/tokenize",
        json={"model": smollm2.model, "prompt": text, "add_special_tokens": False},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return int(answer.json()["count"])


@pytest.fixture
def admin(agents_server: RunningServer) -> Iterator[AdminApi]:
    admin = AdminApi(agents_server.url, agents_server.db_url)
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def agents_server(
    smollm2: RealVllm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    url, name = make_database("postgres", tmp_path_factory.mktemp("agents-db"))
    try:
        with app_server(
            "postgres",
            url,
            smollm2.url,
            tmp_path_factory.mktemp("agents-data"),
            token_artifacts="required",
        ) as running:
            yield running
    finally:
        if name:
            drop_pg_database(name)


def test_forty_agent_turns_on_smollm2_compact_past_the_threshold(
    smollm2: RealVllm, agents_server: RunningServer, admin: AdminApi
) -> None:
    tenant: TenantKeys = create_tenant(agents_server.db_url)
    run = asyncio.run(_run(f"{agents_server.url}/v1", tenant.api_key, smollm2.model))
    # The summary round is the window plus one user turn asking for the summary (ChatML).
    question = _tokens(smollm2, f"<|im_start|>user\n{SUMMARY_REQUEST}<|im_end|>\n")

    # Every turn completed, each chained to the one before, all 40 in the stored lineage.
    responses = run.responses
    assert len(responses) == TURNS and len(run.logged) == TURNS
    assert all(r.status == "completed" for r in responses)
    assert [r.previous_response_id for r in responses] == [None] + [r.id for r in responses[:-1]]
    assert admin.ancestors(responses[-1].id) == [r.id for r in responses]

    windows: list[int] = []
    compacted: list[int] = []
    accounts = [admin.token_account(r.id) for r in responses]
    for turn, (response, stored) in enumerate(zip(responses, accounts, strict=True)):
        assert response.usage is not None
        types = [item.type for item in response.output]
        answer_prompt = stored["artifact"]["prompt_tokens"]
        if types == ["function_call"]:
            # Sent as is: one call, counted by vLLM, within the threshold.
            assert answer_prompt == response.usage.input_tokens <= THRESHOLD, (turn, stored)
            windows.append(response.usage.input_tokens)
            continue
        assert types == ["compaction", "function_call"], (turn, types)
        item = response.output[0]
        assert isinstance(item, ResponseCompactionItem) and item.encrypted_content
        compacted.append(turn)
        # usage adds both rounds; the stored ids are the answer round's.
        summary_prompt = response.usage.input_tokens - answer_prompt
        window = summary_prompt - question
        windows.append(window)
        assert window > THRESHOLD >= answer_prompt, (turn, window, answer_prompt)
    # Compacting at the first turn past the threshold each time, several times in 40.
    assert len(compacted) >= 3, windows
    assert all(windows[turn - 1] <= THRESHOLD for turn in compacted)

    for turn in compacted:
        if turn + 1 == TURNS:
            continue
        after = responses[turn + 1]
        account = accounts[turn + 1]["account"]
        item = responses[turn].output[0]
        assert isinstance(item, ResponseCompactionItem) and item.encrypted_content
        assert after.usage is not None
        # The next turn was sent the compacted window: it parts from the compacting
        # turn's answer prompt only after the instructions and the summary, and it is a
        # fraction of the window that was summarized.
        assert account["parent_id"] == responses[turn].id
        assert account["prompt_tokens"] == after.usage.input_tokens < windows[turn] // 2
        assert account["reusable_tokens"] > _tokens(smollm2, item.encrypted_content)
        assert account["cause"] == "context_compacted", account
        assert account["divergence"]["region"] == "prompt", account
        assert "compacted its context" in account["explanation"]
    # No other turn blames compaction for what it lost.
    others = [a["account"]["cause"] for t, a in enumerate(accounts) if t - 1 not in compacted]
    assert "context_compacted" not in others, others

    # The stored chain continues without context_management: the whole chain is replayed
    # (every turn's input, the summary in its place) from the first compaction, parting
    # from its compacted prompt right after the instructions...
    first = compacted[0]
    branch_id = asyncio.run(
        _branch(f"{agents_server.url}/v1", tenant.api_key, smollm2.model, run, first)
    )
    client: OpenAI = agents_server.client(tenant, timeout=300)
    branch = client.responses.retrieve(branch_id)
    assert branch.status == "completed" and branch.usage is not None
    assert branch.usage.input_tokens > windows[first]
    replayed = admin.token_account(branch.id)["account"]
    after_first = accounts[first + 1]["account"]
    assert replayed["parent_id"] == responses[first].id and replayed["changes"] == []
    assert replayed["divergence"]["region"] == "prompt"
    assert replayed["reusable_tokens"] < after_first["reusable_tokens"]
    # ...while from the 40th turn the whole chain no longer fits SmolLM2's window: without
    # compaction, the run could not have gone on.
    last = run.outputs[-1][0]
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(
            model=smollm2.model,
            previous_response_id=responses[-1].id,
            input=[cast(Any, last), {"role": "user", "content": "How many deliveries?"}],
            instructions=INSTRUCTIONS,
            max_output_tokens=MAX_OUTPUT,
        )
    assert "maximum context length" in refused.value.message
    print(
        f"\n{TURNS} turns in {run.seconds:.0f} s; compacted at turns {compacted}; windows "
        f"{windows}; the branch replayed {branch.usage.input_tokens} tokens "
        f"({replayed['measured_cached']} cached); the full chain: {refused.value.code}"
    )
