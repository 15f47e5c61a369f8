"""Token-level truth on a real small instruct model (SmolLM2-135M-Instruct, float32, CPU
vLLM): every stored turn carries the exact token ids vLLM prefilled and generated, and
each continuation's reuse account attributes every lost token to the right cause.

Temperature 0 throughout, so each case is deterministic. The oracles are independent of
our server: vLLM itself, asked directly (``enable_response_messages``, ``/tokenize``).
Run with ``pytest -m real_vllm tests/real_vllm``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types.responses import FunctionToolParam

from tests.conftest import RunningServer
from tests.real_vllm.conftest import RealVllm
from tests.support.admin_api import AdminApi
from tests.support.tenants import TenantKeys, create_tenant

pytestmark = pytest.mark.real_vllm

MAX_OUTPUT = 40
WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
# Re-tokenizing this answer's text splits one generated token in two (checked against
# vLLM directly in the test itself).
DIVERGING_PROMPT = "Give me three tips for sleeping well, as a numbered list."


@pytest.fixture
def tenant(smol_server: RunningServer) -> TenantKeys:
    return create_tenant(smol_server.db_url)


@pytest.fixture
def client(smol_server: RunningServer, tenant: TenantKeys) -> OpenAI:
    return smol_server.client(tenant, timeout=300)


@pytest.fixture
def admin(smol_server: RunningServer) -> Iterator[AdminApi]:
    admin = AdminApi(smol_server.url, smol_server.db_url)
    yield admin
    admin.close()


def ask(client: OpenAI, vllm: RealVllm, text: str, **fields: Any) -> Any:
    fields.setdefault("max_output_tokens", MAX_OUTPUT)
    response = client.responses.create(model=vllm.model, input=text, temperature=0, **fields)
    assert response.status in ("completed", "incomplete"), response
    return response


class Reported:
    """Reads a continuation's token account and adds it, as one row, to the tier's report."""

    def __init__(self, admin: AdminApi, backend: str, report: list[dict[str, Any]]) -> None:
        self.admin, self.backend, self.report = admin, backend, report

    def account(self, case: str, response: Any, *, decoded: bool = False) -> dict[str, Any]:
        account = (self.admin.decoded if decoded else self.admin.account)(response.id)
        self.report.append(
            {
                "case": f"smollm2/{case}/{self.backend}",
                "status": account["status"],
                "cause": account["cause"],
                "parent_tokens": account["parent_tokens"],
                "reusable": account["reusable_tokens"],
                "expected": account["expected_cached"],
                "measured": account["measured_cached"],
                "ideal": account["ideal_cached"],
                "lost": account["lost"],
                "input_tokens": response.usage.input_tokens,
            }
        )
        return account


@pytest.fixture
def reported(admin: AdminApi, smol_server: RunningServer, report: list[dict[str, Any]]) -> Reported:
    return Reported(admin, smol_server.backend, report)


def test_a_chain_is_token_exact_and_measured_equals_expected(
    client: OpenAI, admin: AdminApi, smollm2: RealVllm, reported: Reported
) -> None:
    texts = [
        "List three fruits, one per line.",
        "Now list three vegetables, one per line.",
        "And three colors, one per line.",
        "Thanks. Finally, three animals, one per line.",
    ]
    previous = None
    for text in texts:
        response = ask(
            client, smollm2, text, **({"previous_response_id": previous.id} if previous else {})
        )
        if previous is None:
            assert admin.account(response.id)["status"] == "cold_start"
        else:
            account = reported.account("chain", response)
            assert account["status"] == "exact", account["explanation"]
            # The engine's own block size (read from its /metrics), never an assumed one.
            assert account["block_size"] == smollm2.block_size
            assert account["measured_cached"] == account["expected_cached"], account
            assert account["measured_cached"] == response.usage.input_tokens_details.cached_tokens
            assert account["parent_tokens"] == (
                previous.usage.input_tokens + previous.usage.output_tokens
            )
            assert set(account["lost"]) <= {"partial_block"}
        previous = response


def test_a_conversation_is_token_exact_turn_after_turn(
    client: OpenAI, admin: AdminApi, smollm2: RealVllm, reported: Reported
) -> None:
    conversation = client.conversations.create()
    texts = [
        "Give me a haiku about rain.",
        "Now a haiku about snow.",
        "And one about the sun.",
    ]
    for turn, text in enumerate(texts):
        response = ask(client, smollm2, text, conversation=conversation.id)
        if turn == 0:
            assert admin.account(response.id)["status"] == "cold_start"
            continue
        account = reported.account("conversation", response)
        assert account["status"] == "exact", account["explanation"]
        assert account["measured_cached"] == account["expected_cached"], account


def test_a_re_tokenized_answer_is_found_where_vllm_itself_diverges(
    client: OpenAI, smollm2: RealVllm, reported: Reported
) -> None:
    first = ask(client, smollm2, DIVERGING_PROMPT)
    second = ask(client, smollm2, "Thanks.", previous_response_id=first.id)
    account = reported.account("retokenized", second, decoded=True)

    # The oracle: vLLM's own ids for the first turn, and its tokenization of the second
    # turn's messages (the same conversation rendered by the same template).
    with httpx.Client(base_url=smollm2.url, timeout=300) as vllm:
        direct = vllm.post(
            "/v1/responses",
            json={
                "model": smollm2.model,
                "input": DIVERGING_PROMPT,
                "temperature": 0,
                "max_output_tokens": MAX_OUTPUT,
                "store": False,
                "enable_response_messages": True,
            },
        ).json()
        answer = direct["output"][0]["content"][0]["text"]
        assert answer == first.output_text
        parent = direct["input_messages"][0]["tokens"] + direct["output_messages"][0]["tokens"]
        child = vllm.post(
            "/tokenize",
            json={
                "model": smollm2.model,
                "messages": [
                    {"role": "user", "content": DIVERGING_PROMPT},
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": "Thanks."},
                ],
                "add_generation_prompt": True,
            },
        ).json()["tokens"]
    offset = next(i for i, (a, b) in enumerate(zip(parent, child, strict=False)) if a != b)

    assert account["status"] == "diverged" and account["cause"] == "retokenization"
    divergence = account["divergence"]
    assert divergence["offset"] == offset
    assert divergence["region"] == "output" and offset > first.usage.input_tokens
    assert divergence["realigned"] is True
    assert divergence["parent_tokens"] == parent[offset : offset + len(divergence["parent_tokens"])]
    # The same text, split differently.
    assert "".join(divergence["parent_pieces"]) == "".join(divergence["child_pieces"])
    assert account["reusable_tokens"] == offset
    assert account["expected_cached"] == offset // smollm2.block_size * smollm2.block_size
    assert account["measured_cached"] == account["expected_cached"]
    assert account["lost"]["retokenization"] == len(parent) - offset
    assert "Re-tokenization diverged" in account["explanation"]


def test_a_replayed_function_call_is_dropped_by_the_template(
    client: OpenAI, smollm2: RealVllm, reported: Reported
) -> None:
    first = ask(
        client,
        smollm2,
        "What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        # The schema-guided call spends tokens on whitespace (56 for this one).
        max_output_tokens=160,
    )
    call = next(item for item in first.output if item.type == "function_call")
    second = client.responses.create(
        model=smollm2.model,
        previous_response_id=first.id,
        tools=[WEATHER],
        temperature=0,
        max_output_tokens=MAX_OUTPUT,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}],
    )
    account = reported.account("function-call", second)
    assert account["status"] == "diverged" and account["cause"] == "template"
    # SmolLM2's template renders only content: the call's tokens are gone right after
    # the parent's prompt.
    assert account["divergence"]["offset"] == first.usage.input_tokens
    assert account["divergence"]["region"] == "output"
    assert account["divergence"]["realigned"] is False
    assert account["measured_cached"] == account["expected_cached"]
    assert "function_call" in account["explanation"]


def test_salt_rotation_and_a_tools_change_are_classified(
    client: OpenAI, admin: AdminApi, smollm2: RealVllm, tenant: TenantKeys, reported: Reported
) -> None:
    first = ask(client, smollm2, "Name a planet.")
    with_tools = ask(
        client, smollm2, "Name another.", previous_response_id=first.id, tools=[WEATHER]
    )
    tools = reported.account("tools-change", with_tools)
    assert tools["changes"] == ["tools"]
    # This model's template does not render tools: the change leaves the tokens alone.
    assert tools["status"] == "exact"
    assert tools["measured_cached"] == tools["expected_cached"]
    assert "tools changed, but not the rendered tokens" in tools["explanation"]

    assert admin.http.post(f"/tenants/{tenant.id}/rotate_salt").status_code == 200
    rotated = ask(
        client, smollm2, "And one more.", previous_response_id=with_tools.id, tools=[WEATHER]
    )
    salt = reported.account("salt-rotation", rotated)
    assert salt["cause"] == "fingerprint" and "salt_epoch" in salt["changes"]
    assert salt["expected_cached"] == 0 == salt["measured_cached"]
    assert salt["lost"] == {"fingerprint": salt["parent_tokens"]}


def test_input_tokens_are_counted_by_the_render_endpoint(client: OpenAI, smollm2: RealVllm) -> None:
    first = ask(client, smollm2, "Name a river.")
    counted = client.responses.input_tokens.count(
        model=smollm2.model, input="Name another.", previous_response_id=first.id
    )
    second = ask(client, smollm2, "Name another.", previous_response_id=first.id)
    assert counted.input_tokens == second.usage.input_tokens


def test_a_siblings_blocks_do_not_shrink_the_parents_losses(
    client: OpenAI, smollm2: RealVllm, reported: Reported
) -> None:
    """Two continuations of one parent with the same prompt (the same split): the second
    is served the first one's blocks past the divergence, and still loses what the parent
    could not give it, exactly as the first did (issue 38, item 14)."""
    first = ask(client, smollm2, DIVERGING_PROMPT)
    # Long enough to fill blocks of its own past the divergence.
    follow = (
        "Thanks. Now explain, in two short paragraphs, why a regular bedtime, a dark and "
        "quiet room, and less coffee in the afternoon each help a person fall asleep sooner "
        "and wake up rested, and say which of the three matters most."
    )
    accounts = []
    for case in ("sibling-first", "sibling-second"):
        child = ask(client, smollm2, follow, previous_response_id=first.id, max_output_tokens=1)
        account = reported.account(case, child)
        assert account["status"] == "diverged" and account["cause"] == "retokenization"
        assert account["measured_cached"] == child.usage.input_tokens_details.cached_tokens
        accounts.append(account)
    alone, helped = accounts
    # The first one was served what the parent could give; the second, the first's blocks
    # reaching past the divergence too.
    assert alone["measured_cached"] == alone["expected_cached"]
    assert alone["extra_cached"] == 0
    assert helped["expected_cached"] == alone["expected_cached"]
    assert helped["measured_cached"] > helped["expected_cached"] + smollm2.block_size
    assert helped["extra_cached"] == helped["measured_cached"] - helped["expected_cached"]
    # The losses are the parent's alone: the same for both.
    assert helped["divergence"]["offset"] == alone["divergence"]["offset"]
    assert helped["lost"] == alone["lost"]
    assert helped["lost"]["retokenization"] == helped["divergence"]["remainder"]
    assert sum(helped["lost"].values()) == helped["parent_tokens"] - helped["expected_cached"]
    assert "more were cached from a prefix shared with other requests" in helped["explanation"]
