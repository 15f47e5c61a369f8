"""The simulator's Anthropic Messages API, over real loopback HTTP: vLLM's shapes, its
two error shapes, and prefix-cache numbers in Anthropic's usage fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.typed import narrow, served_cached_tokens
from tests.upstream_sim import Call, Reply, SimServer, StreamError, ToolCalls, render_messages

MODEL = "sim-model"
PROMPT = "A long enough question about caches, " * 8


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(model=MODEL, block_size=16) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(sim: SimServer) -> None:
    sim.reset()


def post(sim: SimServer, body: dict[str, Any], path: str = "/v1/messages") -> httpx.Response:
    return httpx.post(sim.url + path, json=body, timeout=10)


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": PROMPT}],
        **extra,
    }


def test_a_json_answer_has_vllms_shape_and_usage() -> None:
    with SimServer(model=MODEL) as sim:
        sim.push(Reply("hello"))
        first = post(sim, body(cache_salt="s1")).json()
        assert set(first) == {"id", "type", "role", "content", "model", "stop_reason", "usage"}
        assert first["id"].startswith("chatcmpl-") and first["content"] == [
            {"type": "text", "text": "hello"}
        ]
        assert first["usage"]["cache_read_input_tokens"] == 0
        again = post(sim, body(cache_salt="s1")).json()
        other = post(sim, body(cache_salt="s2")).json()
    cached = again["usage"]["cache_read_input_tokens"]
    assert cached > 0 and other["usage"]["cache_read_input_tokens"] == 0
    # As vLLM 0.32 reports it: what it computed is cache creation, input_tokens is 0.
    assert again["usage"] == {
        "input_tokens": 0,
        "output_tokens": again["usage"]["output_tokens"],
        "cache_creation_input_tokens": first["usage"]["cache_creation_input_tokens"] - cached,
        "cache_read_input_tokens": cached,
    }


def test_the_stream_is_vllms_event_sequence(sim: SimServer) -> None:
    sim.push(ToolCalls([Call("look", {"q": 1}, call_id="toolu_1")], text="let me look"))
    with httpx.stream("POST", sim.url + "/v1/messages", json=body(stream=True), timeout=10) as r:
        frames = [f for f in r.read().decode().split("\n\n") if f]
    events = [json.loads(f.split("data: ", 1)[1]) for f in frames]
    kinds = [e["type"] for e in events]
    # Runs of deltas collapsed: one text block, then one tool_use block.
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert collapsed == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}},
    ]
    arguments = "".join(
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(arguments) == {"q": 1}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert "cache_read_input_tokens" not in events[0]["message"]["usage"]
    assert "cache_read_input_tokens" in events[-2]["usage"]


def test_a_stream_error_is_one_error_event_then_the_end(sim: SimServer) -> None:
    sim.push(StreamError(after_events=2, message="boom"))
    with httpx.stream("POST", sim.url + "/v1/messages", json=body(stream=True), timeout=10) as r:
        frames = [f for f in r.read().decode().split("\n\n") if f]
    assert frames[-1].startswith("event: error")
    assert json.loads(frames[-1].split("data: ", 1)[1])["error"]["message"] == "boom"


def test_schema_errors_are_openai_shaped_and_handler_errors_anthropic_shaped(
    sim: SimServer,
) -> None:
    missing = post(sim, {"model": MODEL, "messages": []})
    assert missing.status_code == 400 and missing.json()["error"]["code"] == 400
    unknown = post(sim, body(model="other"))
    assert unknown.status_code == 404
    assert unknown.json() == {
        "type": "error",
        "error": {"type": "NotFoundError", "message": "The model `other` does not exist."},
    }
    bad_salt = post(sim, body(cache_salt="a/b"))
    assert bad_salt.status_code == 400 and bad_salt.json()["type"] == "error"


def test_the_billing_header_block_is_not_part_of_the_prompt() -> None:
    plain = {
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": "x"}],
    }
    billed = {
        "system": [
            {
                "type": "text",
                "text": "x-anthropic-billing-header: cc_version=1; cc_entrypoint=cli;",
            },
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [{"role": "user", "content": "x"}],
    }
    assert render_messages(plain).text == render_messages(billed).text


def test_a_replayed_tool_use_renders_as_the_generated_call(sim: SimServer) -> None:
    sim.push(ToolCalls([Call("look", {"q": 1}, call_id="toolu_1")]), Reply("done"))
    first = post(sim, body(tools=[{"name": "look", "input_schema": {"type": "object"}}])).json()
    history = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": first["content"]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "1"}],
        },
    ]
    post(
        sim,
        {**body(tools=[{"name": "look", "input_schema": {"type": "object"}}]), "messages": history},
    )
    calls = sim.requests("/v1/messages")
    assert narrow(calls[1].prompt_text, str).startswith(narrow(calls[0].prompt_text, str))
    # Prompt and generated call are cached, up to the last full block.
    answered = narrow(calls[0].prompt_tokens, int) + narrow(calls[0].output_tokens, int)
    assert served_cached_tokens(calls[1]) >= answered - 2 * 16


def test_count_tokens_counts_the_rendered_prompt(sim: SimServer) -> None:
    answer = post(
        sim,
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/messages/count_tokens",
    )
    assert answer.status_code == 200
    count = answer.json()["input_tokens"]
    assert answer.json() == {
        "input_tokens": count,
        "context_management": {"original_input_tokens": count},
    }
    assert (
        post(sim, {"model": "other", "messages": []}, "/v1/messages/count_tokens").status_code
        == 404
    )
