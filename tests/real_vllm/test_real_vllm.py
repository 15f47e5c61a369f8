"""Our server in front of a real vLLM (CPU, tiny random Llama): prefix-cache reuse across
a previous_response_id chain, tenant isolation by cache salt, and exact input-token counts.

The model emits nonsense, so only ids, statuses and token counts are asserted. Run with
``pytest -m real_vllm`` (``scripts/test.sh`` does when ``AGENTIC_REAL_VLLM=1`` or ``CI=true``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from openai import BadRequestError, NotFoundError, OpenAI
from openai.types.responses import ResponseReasoningItem, ToolParam

from tests.conftest import RunningServer
from tests.real_vllm.conftest import RealVllm
from tests.support.tenants import create_tenant
from tests.support.typed import narrow, usage_of

pytestmark = pytest.mark.real_vllm

INSTRUCTIONS = "You are a careful coding assistant. Answer briefly."
# The SDK's FunctionToolParam requires "strict", which the API (and this server) take as
# optional; the tests send what clients send.
TOOLS: list[ToolParam] = [
    {  # type: ignore[list-item]
        "type": "function",
        "name": "read_file",
        "description": "Read a file from the workspace and return its text.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


def user_text(turn: int, nonce: str, notes: int) -> str:
    lines = [f"Session {nonce}, turn {turn}."]
    lines += [
        f"Note {turn}.{i}: module_{i}.py has {i * 7 + turn} lines that need a review."
        for i in range(notes)
    ]
    return "\n".join(lines)


def blocks(tokens: int, block: int) -> int:
    return (tokens // block) * block


def cached(response: Any) -> int:
    return int(usage_of(response).input_tokens_details.cached_tokens)


def client_for(server: RunningServer, tenant: Any) -> OpenAI:
    return server.client(tenant, timeout=120)


def run_chain(
    client: OpenAI,
    vllm: RealVllm,
    *,
    turns: int,
    max_output_tokens: int,
    report: list[dict[str, Any]],
    label: str,
    **create: Any,
) -> list[dict[str, Any]]:
    """Runs a chain; per continuation: measured cached tokens and the block-aligned bounds.

    ``ideal`` = every full block of turn N-1's prompt (what our byte-exact replay must
    give); ``upper`` = every full block of turn N-1's prompt plus its generated tokens
    (reached only where vLLM's re-tokenization of the generated text gives back the same
    ids). Both are capped by what vLLM can reuse of turn N's prompt (it always recomputes
    the last prompt token).
    """
    nonce = uuid.uuid4().hex[:12]
    rows: list[dict[str, Any]] = []
    previous: Any = None
    for turn in range(1, turns + 1):
        response = client.responses.create(
            model=vllm.model,
            input=user_text(turn, nonce, notes=12 if turn == 1 else 6),
            instructions=INSTRUCTIONS,
            temperature=0,
            max_output_tokens=max_output_tokens,
            **({"previous_response_id": previous.id} if previous else {}),
            **create,
        )
        assert response.status in ("completed", "incomplete"), response
        row: dict[str, Any] = {
            "case": label,
            "turn": turn,
            "input_tokens": usage_of(response).input_tokens,
            "output_tokens": usage_of(response).output_tokens,
            "cached": cached(response),
        }
        if previous is None:
            assert row["cached"] == 0, "a fresh nonce must start cold"
            row["ideal"] = row["upper"] = 0
        else:
            reusable_cap = blocks(usage_of(response).input_tokens - 1, vllm.block_size)
            p_prev = usage_of(previous).input_tokens
            o_prev = usage_of(previous).output_tokens
            row["ideal"] = min(blocks(p_prev, vllm.block_size), reusable_cap)
            row["upper"] = min(blocks(p_prev + o_prev - 1, vllm.block_size), reusable_cap)
        row["measured/ideal"] = round(row["cached"] / row["ideal"], 4) if row["ideal"] else None
        rows.append(row)
        report.append(row)
        previous = response
    return rows


def test_chain_reuses_exactly_every_full_block_of_the_previous_prompt(
    real_server: RunningServer, real_vllm: RealVllm, report: list[dict[str, Any]]
) -> None:
    # One output token is never fed back, so turn N-1 leaves exactly the full blocks of its
    # prompt in the cache: turn N must hit all of them and nothing else.
    client = client_for(real_server, create_tenant(real_server.db_url))
    rows = run_chain(
        client,
        real_vllm,
        turns=5,
        max_output_tokens=1,
        report=report,
        label=f"chain-1tok/{real_server.backend}",
    )
    for row in rows[1:]:
        assert row["ideal"] == row["upper"]
        assert row["ideal"] >= 4 * real_vllm.block_size
        assert row["cached"] == row["ideal"], row


def test_chain_with_longer_answers_covers_every_full_block(
    real_server: RunningServer, real_vllm: RealVllm, report: list[dict[str, Any]]
) -> None:
    client = client_for(real_server, create_tenant(real_server.db_url))
    rows = run_chain(
        client,
        real_vllm,
        turns=4,
        max_output_tokens=24,
        report=report,
        label=f"chain-24tok/{real_server.backend}",
        tools=TOOLS,
    )
    for row in rows[1:]:
        assert row["cached"] % real_vllm.block_size == 0
        assert row["ideal"] <= row["cached"] <= row["upper"], row


def test_conversation_turns_reuse_every_full_block(
    real_server: RunningServer, real_vllm: RealVllm, report: list[dict[str, Any]]
) -> None:
    client = client_for(real_server, create_tenant(real_server.db_url))
    try:
        conversation = client.conversations.create()
        probe = client.responses.create(
            model=real_vllm.model, input="hello", conversation=conversation.id, max_output_tokens=1
        )
    except (NotFoundError, BadRequestError) as exc:
        pytest.skip(f"conversations are not available on this server yet: {exc}")
    nonce = uuid.uuid4().hex[:12]
    previous = probe
    for turn in range(1, 4):
        response = client.responses.create(
            model=real_vllm.model,
            input=user_text(turn, nonce, notes=8),
            conversation=conversation.id,
            temperature=0,
            max_output_tokens=1,
        )
        ideal = min(
            blocks(usage_of(previous).input_tokens, real_vllm.block_size),
            blocks(usage_of(response).input_tokens - 1, real_vllm.block_size),
        )
        report.append(
            {
                "case": f"conversation/{real_server.backend}",
                "turn": turn,
                "input_tokens": usage_of(response).input_tokens,
                "cached": cached(response),
                "ideal": ideal,
            }
        )
        assert cached(response) == ideal
        previous = response


def test_another_tenants_identical_prompt_gets_no_cached_tokens(
    real_server: RunningServer, real_vllm: RealVllm, report: list[dict[str, Any]]
) -> None:
    prompt = user_text(1, uuid.uuid4().hex[:12], notes=15)
    owner = client_for(real_server, create_tenant(real_server.db_url))
    stranger = client_for(real_server, create_tenant(real_server.db_url))

    def ask(client: OpenAI) -> Any:
        return client.responses.create(
            model=real_vllm.model, input=prompt, temperature=0, max_output_tokens=4
        )

    first, again, other = ask(owner), ask(owner), ask(stranger)
    size = usage_of(first).input_tokens
    assert usage_of(other).input_tokens == usage_of(again).input_tokens == size
    # The control proves the cache works for the owner, so the stranger's 0 means isolation.
    assert cached(first) == 0
    assert cached(again) == blocks(size - 1, real_vllm.block_size) > 0
    assert cached(other) == 0
    report.append(
        {
            "case": f"tenants/{real_server.backend}",
            "input_tokens": size,
            "owner_repeat_cached": cached(again),
            "other_tenant_cached": cached(other),
        }
    )


def test_input_tokens_agree_with_vllms_count(
    real_server: RunningServer, real_vllm: RealVllm, report: list[dict[str, Any]]
) -> None:
    client = client_for(real_server, create_tenant(real_server.db_url))
    nonce = uuid.uuid4().hex[:12]
    first_input = user_text(1, nonce, notes=5)
    counted = client.responses.input_tokens.count(
        model=real_vllm.model, input=first_input, instructions=INSTRUCTIONS, tools=TOOLS
    )
    first = client.responses.create(
        model=real_vllm.model,
        input=first_input,
        instructions=INSTRUCTIONS,
        tools=TOOLS,
        temperature=0,
        max_output_tokens=16,
    )
    assert counted.input_tokens == usage_of(first).input_tokens
    # A continuation with a function call and its output replayed from storage.
    call_id = f"call_{nonce}"
    tool_turn: list[Any] = [
        {
            "type": "function_call",
            "call_id": call_id,
            "name": "read_file",
            "arguments": '{"path": "module_3.py"}',
        },
        {"type": "function_call_output", "call_id": call_id, "output": "print('hello')\n" * 5},
        {"type": "message", "role": "user", "content": "Now summarise module_3.py."},
    ]
    counted_next = client.responses.input_tokens.count(
        model=real_vllm.model, input=tool_turn, previous_response_id=first.id, tools=TOOLS
    )
    second = client.responses.create(
        model=real_vllm.model,
        input=tool_turn,
        previous_response_id=first.id,
        tools=TOOLS,
        temperature=0,
        max_output_tokens=16,
    )
    assert counted_next.input_tokens == usage_of(second).input_tokens
    assert counted_next.input_tokens > usage_of(first).input_tokens
    report.append(
        {
            "case": f"input_tokens/{real_server.backend}",
            "counted": f"{counted.input_tokens},{counted_next.input_tokens}",
            "vllm_usage": f"{usage_of(first).input_tokens},{usage_of(second).input_tokens}",
        }
    )


def test_a_history_with_reasoning_items_runs_and_replays_its_prefix(
    real_server: RunningServer, real_vllm: RealVllm, report: list[dict[str, Any]]
) -> None:
    """A Codex-style history holding reasoning items (encrypted content set, and null):
    vLLM refuses encrypted content, so without the upstream normalization the first turn
    is a 400. The continuation then reuses every full block of the first prompt."""
    client = client_for(real_server, create_tenant(real_server.db_url))
    nonce = uuid.uuid4().hex[:12]
    history: list[Any] = [
        {"type": "message", "role": "user", "content": user_text(1, nonce, notes=8)},
        {
            "type": "reasoning",
            "id": f"rs_{nonce}_1",
            "summary": [{"type": "summary_text", "text": "Read the notes."}],
            "content": None,
            "encrypted_content": "gAAAAB-opaque-" + nonce,
        },
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{nonce}",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Reviewing.", "annotations": []}],
        },
        {
            "type": "reasoning",
            "id": f"rs_{nonce}_2",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "module_3 first."}],
            "encrypted_content": None,
        },
        {"type": "message", "role": "user", "content": "Go on."},
    ]
    first = client.responses.create(
        model=real_vllm.model,
        input=history,
        instructions=INSTRUCTIONS,
        temperature=0,
        max_output_tokens=8,
    )
    assert first.status in ("completed", "incomplete")
    listed = client.responses.input_items.list(first.id, order="asc").data
    assert (
        narrow(listed[1], ResponseReasoningItem).encrypted_content == "gAAAAB-opaque-" + nonce
    )  # stored as sent
    second = client.responses.create(
        model=real_vllm.model,
        input="And then?",
        previous_response_id=first.id,
        instructions=INSTRUCTIONS,
        temperature=0,
        max_output_tokens=8,
    )
    ideal = min(
        blocks(usage_of(first).input_tokens, real_vllm.block_size),
        blocks(usage_of(second).input_tokens - 1, real_vllm.block_size),
    )
    assert cached(second) == ideal
    report.append(
        {
            "case": f"reasoning_replay/{real_server.backend}",
            "input_tokens": usage_of(second).input_tokens,
            "cached": cached(second),
            "ideal": ideal,
        }
    )
