"""``reasoning.context`` (``auto | current_turn | all_turns``, openai 3.63) through the SDK,
on SQLite and PostgreSQL: each value accepted and echoed as the effective mode, any other
refused before the model runs; ``current_turn`` leaves earlier turns' reasoning out of what
vLLM gets (keeping the reasoning of the turn in progress), ``all_turns`` sends it all; and a
change of it between turns is a fingerprint change the token account and the prompt-cache
diagnostics name."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.api.test_prompt_cache_diagnostics import admin, compared_with, miss
from tests.api.test_token_accounts import account_of
from tests.support.typed import unchecked
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

MODEL = "sim-model"
TOOL: Any = {
    "type": "function",
    "name": "lookup",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    "strict": False,
}
__all__ = ["admin"]  # the fixture, shared with the diagnostics tests


def sent_types(sim: SimServer) -> list[str]:
    """The types of the input items the model server got last."""
    return [item["type"] for item in sim.last("/v1/responses").json["input"]]


@pytest.mark.parametrize(
    ("asked", "effective"),
    [
        (None, "all_turns"),
        ("auto", "all_turns"),
        ("current_turn", "current_turn"),
        ("all_turns", "all_turns"),
    ],
)
def test_each_sdk_value_is_echoed_as_the_effective_mode_and_never_forwarded(
    client: OpenAI, sim: SimServer, asked: Any, effective: str
) -> None:
    sim.push(Reply("ok"))
    reasoning: Any = {"effort": "low"} if asked is None else {"effort": "low", "context": asked}
    made = client.responses.create(model=MODEL, input="hello", reasoning=reasoning)
    assert made.reasoning is not None
    assert (made.reasoning.context, made.reasoning.effort) == (effective, "low")
    fetched = client.responses.retrieve(made.id).reasoning
    assert fetched is not None and fetched.context == effective
    # vLLM has no such field: the server applies it, and sends the rest of reasoning.
    assert sim.last("/v1/responses").json["reasoning"] == {"effort": "low"}


def test_without_reasoning_the_effective_mode_is_still_echoed(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("ok"))
    made = client.responses.create(model=MODEL, input="hello")
    assert made.reasoning is not None and made.reasoning.context == "all_turns"
    assert "reasoning" not in sim.last("/v1/responses").json


def test_a_value_outside_the_sdks_is_refused_before_the_model_runs(
    client: OpenAI, sim: SimServer
) -> None:
    before = len(sim.requests("/v1/responses"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model=MODEL, input="hello", reasoning=unchecked({"context": "previous_turn"})
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == ("reasoning.context", "unsupported_value")
    assert "current_turn" in error["message"]
    assert len(sim.requests("/v1/responses")) == before


def test_current_turn_leaves_earlier_turns_reasoning_out_and_all_turns_sends_it(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("first answer", reasoning="first thoughts"), Reply("a"), Reply("b"))
    first = client.responses.create(model=MODEL, input="first question")
    assert [item.type for item in first.output] == ["reasoning", "message"]

    client.responses.create(
        model=MODEL,
        input="second question",
        previous_response_id=first.id,
        reasoning={"context": "current_turn"},
    )
    assert sent_types(sim) == ["message", "message", "message"]
    client.responses.create(
        model=MODEL,
        input="second question",
        previous_response_id=first.id,
        reasoning={"context": "all_turns"},
    )
    assert sent_types(sim) == ["message", "reasoning", "message", "message"]
    # What is stored is what the client sent and the model answered, whatever was sent.
    listed = client.responses.input_items.list(first.id).data
    assert [item.type for item in listed] == ["message"]


def test_current_turn_keeps_the_reasoning_of_the_turn_in_progress(
    client: OpenAI, sim: SimServer
) -> None:
    # A function call answered by the client continues the same turn: no user message
    # comes between the call's reasoning and its output.
    sim.push(
        Reply("earlier answer", reasoning="earlier thoughts"),
        ToolCalls([Call("lookup", {"q": "x"}, call_id="call_1")], reasoning="plan a lookup"),
        Reply("found it"),
    )
    earlier = client.responses.create(model=MODEL, input="earlier question", tools=[TOOL])
    called = client.responses.create(
        model=MODEL,
        input="look it up",
        tools=[TOOL],
        previous_response_id=earlier.id,
        reasoning={"context": "current_turn"},
    )
    assert [item.type for item in called.output] == ["reasoning", "function_call"]
    answered = client.responses.create(
        model=MODEL,
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "42"}],
        tools=[TOOL],
        previous_response_id=called.id,
        reasoning={"context": "current_turn"},
    )
    assert answered.status == "completed"
    assert sent_types(sim) == [
        "message",  # earlier question (its reasoning left out)
        "message",  # earlier answer
        "message",  # look it up
        "reasoning",  # this turn's plan: kept
        "function_call",
        "function_call_output",
    ]


def test_a_changed_context_is_named_by_the_account_and_the_diagnostics(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    sim.push(
        Reply("An answer with enough words to fill a cache block or two.", reasoning="hmm"),
        Reply("again"),
        Reply("once more"),
    )
    first = client.responses.create(model=MODEL, input="A question?")
    changed = client.responses.create(
        model=MODEL,
        input="Another question?",
        previous_response_id=first.id,
        reasoning={"context": "current_turn"},
        prompt_cache_options=compared_with(first.id),
    )
    assert miss(changed).reason == "input_changed"
    account = account_of(admin, changed.id)["account"]
    assert account["cause"] == "fingerprint"
    assert account["changes"] == ["reasoning_context"]
    # Naming it again, explicitly, is no change: the default is all_turns.
    kept = client.responses.create(
        model=MODEL,
        input="Another question?",
        previous_response_id=first.id,
        reasoning={"context": "all_turns"},
    )
    assert account_of(admin, kept.id)["account"]["changes"] == []
