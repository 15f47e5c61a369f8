"""Tests of the vLLM-shaped upstream simulator, over real loopback HTTP."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.upstream_sim import (
    IM_END,
    Call,
    Disconnect,
    Fail,
    Hang,
    Malformed,
    PrefixCache,
    Reply,
    SimConfig,
    SimServer,
    SimState,
    StreamError,
    ToolCalls,
    behavior_from_json,
    render_chat,
    render_responses,
    split,
    tokenize,
)
from tests.upstream_sim.generation import generate

MODEL = "sim-model"
BLOCK = 16
HEX32 = "[0-9a-f]{32}"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def _server() -> Iterator[SimServer]:
    with SimServer(model=MODEL, block_size=BLOCK) as sim:
        yield sim


@pytest.fixture
def sim(_server: SimServer) -> SimServer:
    _server.reset()
    return _server


# Clients are shared by the module's tests (building one costs ~0.1 s of TLS setup);
# tests take ``sim`` too, which resets the simulator before each test.
@pytest.fixture(scope="module")
def client(_server: SimServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=_server.url + "/v1", api_key="x", max_retries=0, timeout=10) as c:
        yield c


@pytest.fixture(scope="module")
def http(_server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=_server.url, timeout=10) as c:
        yield c


def replay(first_input: list[dict[str, Any]], response) -> list[dict[str, Any]]:
    """The next turn's input: prior input, prior output verbatim (as a client would)."""
    return [*first_input, *(item.model_dump(exclude_none=True) for item in response.output)]


# --- building blocks ------------------------------------------------------------------


def test_tokenizer_keeps_newlines_and_special_tokens_as_boundaries():
    text = "<|im_start|>assistant\n  hello, world!<|im_end|>\n"
    pieces = split(text)
    assert "".join(pieces) == text
    assert pieces[:3] == ["<|im_start|>", "assistant", "\n"]
    assert IM_END in pieces
    a, b = "x = 1\n", "\n  y"
    assert tokenize(a + b) == tokenize(a) + tokenize(b)
    assert tokenize("same text") == tokenize("same text")


def test_prefix_cache_counts_full_blocks_and_keeps_the_last_token():
    cache = PrefixCache(block_size=4)
    tokens = list(range(10))
    assert cache.lookup(tokens, None) == 0
    cache.insert(tokens, None)
    assert cache.block_count() == 2  # the partial third block is not held
    assert cache.lookup(tokens, None) == 8
    assert cache.lookup(tokens[:8], None) == 4  # never the whole prompt
    assert cache.lookup(tokens, "salt") == 0
    assert cache.lookup([99, *tokens[1:]], None) == 0  # chain: first block differs


def test_prefix_cache_lru_capacity():
    cache = PrefixCache(block_size=2, capacity_blocks=2)
    cache.insert([1, 2, 3, 4, 5, 6], None)
    assert cache.block_count() == 2
    assert cache.lookup([1, 2, 3, 4, 5, 6, 7], None) == 0  # the root block was evicted


def test_render_responses_items():
    body = {
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "input": [
            {"role": "user", "content": "hi"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "hmm"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "calling"}],
            },
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        ],
    }
    text = render_responses(body).text
    assert text == (
        "<|im_start|>system\nbe brief\n\n# Tools\n\n<tools>\n"
        '{"type":"function","name":"f","parameters":{}}\n</tools><|im_end|>\n'
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nhmm\n</think>\ncalling\n"
        '<tool_call>\n{"name": "f", "arguments": {"a":1}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\n42<|im_end|>\n"
        '<|im_start|>web_search_call\n{"type":"web_search_call","id":"ws_1",'
        '"status":"completed"}<|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    assert render_responses({"input": "hi"}).text == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_generation_truncates_on_a_token_boundary():
    gen = generate(Reply("one two three four"), max_tokens=3)
    assert gen.truncated and gen.output_tokens == 3
    assert gen.parts[0].part.content == "one two"
    gen = generate(ToolCalls([Call("f", "{}")], text="x"), max_tokens=2)
    assert [p.part.kind for p in gen.parts] == ["text"]  # the cut call is dropped
    full = generate(Reply("hi"), max_tokens=2)
    assert not full.truncated and full.pieces == ("hi", IM_END)


# --- basic endpoints ------------------------------------------------------------------


def test_models_health_and_version(sim, client, http):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert http.get("/health").status_code == 200
    assert http.get("/version").json() == {"version": "0.32.0"}


def test_tokenize_prompt_and_messages_match_the_generation_prompt(sim, client, http):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "count me"}]
    tok = http.post("/tokenize", json={"model": MODEL, "messages": messages}).json()
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 32768
    assert tok["tokens"] == tokenize(render_chat(messages).text)
    chat = client.chat.completions.create(model=MODEL, messages=messages)
    assert chat.usage.prompt_tokens == tok["count"]
    plain = http.post("/tokenize", json={"prompt": "a b", "return_token_strs": True}).json()
    assert plain["token_strs"] == ["a", " ", "b"]
    missing = http.post("/tokenize", json={"model": "nope", "prompt": "x"})
    assert missing.status_code == 404


# --- validation -----------------------------------------------------------------------


def test_unknown_model_is_404_with_vllm_error_body(sim, http):
    r = http.post("/v1/responses", json={"model": "other", "input": "hi"})
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "message": "The model `other` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }
    r = http.post("/v1/chat/completions", json={"model": "other", "messages": []})
    assert r.status_code == 404
    assert sim.last().outcome == "rejected"


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_bad_json_and_content_type_are_400(sim, http, path):
    r = http.post(path, content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert r.json()["error"]["code"] == 400
    r = http.post(path, content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 400


def test_reasoning_with_encrypted_content_is_refused_as_vllm_does(sim, http):
    """Recorded from vLLM 0.32 (tests/fixtures/vllm/errors.json): same status, same body."""
    fixtures = json.loads((REPO_ROOT / "tests/fixtures/vllm/errors.json").read_text())
    recorded = fixtures["item_reasoning_encrypted_content"]
    body = {**recorded["request"], "model": MODEL}
    r = http.post("/v1/responses", json=body)
    assert (r.status_code, r.json()) == (recorded["status_code"], recorded["body"])


def test_reasoning_items_without_encrypted_content_are_accepted(sim, http):
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": None,
    }
    body = {"model": MODEL, "input": [item, {"role": "user", "content": "hi"}]}
    assert http.post("/v1/responses", json=body).status_code == 200
    item["encrypted_content"] = ""  # vLLM tests truthiness: an empty string passes too
    assert http.post("/v1/responses", json=body).status_code == 200


@pytest.mark.parametrize("salt", ["x" * 129, "a@b", "a/b", "a\\b", "a\x00b", "", 7], ids=repr)
def test_invalid_cache_salt_is_400(sim, http, salt):
    for path, body in (
        ("/v1/responses", {"model": MODEL, "input": "hi", "cache_salt": salt}),
        ("/v1/chat/completions", {"model": MODEL, "messages": [], "cache_salt": salt}),
    ):
        r = http.post(path, json=body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == 400
    assert sim.state.pending() == 0


def test_valid_edge_salt_and_rejections_do_not_consume_behaviors(sim, client, http):
    sim.push(Reply("kept"))
    assert http.post("/v1/responses", json={"model": "bad", "input": "x"}).status_code == 404
    r = client.responses.create(model=MODEL, input="hi", extra_body={"cache_salt": "s" * 128})
    assert r.output_text == "kept"


def test_previous_response_id_is_unknown_upstream(sim, http):
    r = http.post("/v1/responses", json={"input": "hi", "previous_response_id": "resp_1"})
    assert r.status_code == 404
    assert r.json()["error"]["param"] == "response_id"


@pytest.mark.parametrize(
    "item",
    [{"type": "compaction", "encrypted_content": "notes"}, {"type": "compaction_trigger"}],
    ids=lambda item: item["type"],
)
def test_compaction_items_are_unsupported_upstream(sim, http, item):
    # vLLM parses OpenAI's compaction items but has no prompt for them.
    sim.push(Reply("not for a refused request"))
    user = {"type": "message", "role": "user", "content": "hi"}
    r = http.post("/v1/responses", json={"model": MODEL, "input": [user, item]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["message"] == f"Unsupported input item type: {item['type']}"
    assert (error["param"], error["code"]) == ("input", 400)
    assert sim.state.pending() == 1


# --- Responses API --------------------------------------------------------------------


def test_responses_json_shape_parses_with_sdk(sim, client):
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    r = client.responses.create(model=MODEL, input="hello there", tools=tools, instructions="i")
    assert re.fullmatch("resp_" + HEX32, r.id)
    assert r.object == "response" and r.status == "completed" and r.model == MODEL
    assert r.output_text == "echo: hello there"
    [msg] = r.output
    assert msg.type == "message" and re.fullmatch("msg_" + HEX32, msg.id)
    assert r.instructions == "i"
    assert [t.name for t in r.tools] == ["f"]
    usage = r.usage
    rec = sim.last("/v1/responses")
    assert usage.input_tokens == rec.prompt_tokens == len(tokenize(rec.prompt_text))
    assert usage.output_tokens == len(split("echo: hello there")) + 1  # + <|im_end|>
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert rec.response_id == r.id


def test_responses_stream_shape_parses_with_sdk(sim, client):
    sim.push(Reply("alpha beta gamma"))
    events = list(client.responses.create(model=MODEL, input="q", stream=True))
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 5 and "".join(deltas) == "alpha beta gamma"
    final = events[-1].response
    assert final.status == "completed" and final.output_text == "alpha beta gamma"
    assert final.output[0].id == events[2].item.id
    assert final.usage.output_tokens == 6
    assert sim.last().events_sent == len(events)


def test_cached_tokens_grow_for_a_replayed_continuation(sim, client):
    salt = {"cache_salt": "tenant-a"}
    first = [{"role": "user", "content": "word " * 40}]
    r1 = client.responses.create(model=MODEL, input=first, extra_body=salt)
    rec1 = sim.last()
    assert r1.usage.input_tokens_details.cached_tokens == 0

    second = [*replay(first, r1), {"role": "user", "content": "and more"}]
    r2 = client.responses.create(model=MODEL, input=second, extra_body=salt)
    rec2 = sim.last()
    # Turn 1's prompt + generated tokens are a token prefix of turn 2's prompt ...
    generated = tokenize(r1.output_text) + tokenize(IM_END)
    assert tokenize(rec2.prompt_text)[: rec1.prompt_tokens + len(generated)] == (
        tokenize(rec1.prompt_text) + generated
    )
    # ... so every full block of it is reused.
    seen = rec1.prompt_tokens + r1.usage.output_tokens
    assert r2.usage.input_tokens_details.cached_tokens == seen // BLOCK * BLOCK
    assert rec2.cached_tokens == r2.usage.input_tokens_details.cached_tokens

    # The identical request again: all but the last block (never the whole prompt).
    r3 = client.responses.create(model=MODEL, input=second, extra_body=salt)
    expected = (r3.usage.input_tokens - 1) // BLOCK * BLOCK
    assert r3.usage.input_tokens_details.cached_tokens == expected

    # Another salt, or none, shares nothing.
    other = client.responses.create(model=MODEL, input=second, extra_body={"cache_salt": "b"})
    assert other.usage.input_tokens_details.cached_tokens == 0
    unsalted = client.responses.create(model=MODEL, input=second)
    assert unsalted.usage.input_tokens_details.cached_tokens == 0


def test_verbatim_replay_of_reasoning_text_and_calls_reuses_every_block(sim, client):
    first = [{"role": "user", "content": "go " * 30}]
    sim.push(ToolCalls([Call("a", {"x": 1}), Call("b")], text="calling", reasoning="plan"))
    r1 = client.responses.create(model=MODEL, input=first)
    assert [o.type for o in r1.output] == ["reasoning", "message", "function_call", "function_call"]
    outputs = [
        {"type": "function_call_output", "call_id": o.call_id, "output": "done"}
        for o in r1.output
        if o.type == "function_call"
    ]
    r2 = client.responses.create(model=MODEL, input=[*replay(first, r1), *outputs])
    seen = sim.requests()[0].prompt_tokens + r1.usage.output_tokens
    assert r2.usage.input_tokens_details.cached_tokens == seen // BLOCK * BLOCK


def test_a_re_rendered_tool_call_breaks_reuse_at_that_point(sim, client):
    first = [{"role": "user", "content": "pad " * 30}]
    sim.push(ToolCalls([Call("lookup", '{"q": "x", "n": 1}')]))
    r1 = client.responses.create(model=MODEL, input=first)
    call = r1.output[0]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "ok"}
    verbatim = client.responses.create(model=MODEL, input=[*replay(first, r1), output])
    reserialized = [
        *first,
        {**call.model_dump(exclude_none=True), "arguments": '{"n":1,"q":"x"}'},
        output,
    ]
    changed = client.responses.create(model=MODEL, input=reserialized)
    good = verbatim.usage.input_tokens_details.cached_tokens
    bad = changed.usage.input_tokens_details.cached_tokens
    assert good >= sim.requests()[0].prompt_tokens // BLOCK * BLOCK
    assert bad < good


def test_max_output_tokens_gives_incomplete(sim, client):
    sim.push(Reply("one two three four five"), Reply("one two three four five"))
    r = client.responses.create(model=MODEL, input="q", max_output_tokens=3)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "one two" and r.usage.output_tokens == 3
    assert r.max_output_tokens == 3
    assert sim.last().outcome == "incomplete"
    events = list(client.responses.create(model=MODEL, input="q", max_output_tokens=3, stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.status == "incomplete"


def test_vllm_style_incomplete_stream_ends_with_completed_event():
    with (
        SimServer(model=MODEL, incomplete_event="response.completed") as sim,
        OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0) as client,
    ):
        events = list(client.responses.create(input="a b c d", max_output_tokens=2, stream=True))
        assert events[-1].type == "response.completed"
        assert events[-1].response.status == "incomplete"


def test_reasoning_then_text(sim, client):
    sim.push(Reply("answer", reasoning="let me think"), Reply("answer", reasoning="let me think"))
    r = client.responses.create(model=MODEL, input="q")
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and re.fullmatch("rs_" + HEX32, reasoning.id)
    assert reasoning.content[0].text == "let me think"
    assert message.content[0].text == "answer"
    assert r.usage.output_tokens_details.reasoning_tokens == len(
        split("<think>\nlet me think\n</think>")
    )
    events = list(client.responses.create(model=MODEL, input="q", stream=True))
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(deltas) == "let me think"
    done = [e for e in events if e.type == "response.reasoning_text.done"]
    assert done[0].text == "let me think"


def test_parallel_tool_calls(sim, client):
    calls = ToolCalls([Call("a", {"x": 1}), Call("b", "{}", call_id="call_fixed")])
    sim.push(calls, calls)
    r = client.responses.create(model=MODEL, input="q")
    assert [(o.type, o.name, o.arguments) for o in r.output] == [
        ("function_call", "a", '{"x": 1}'),
        ("function_call", "b", "{}"),
    ]
    assert re.fullmatch("fc_" + HEX32, r.output[0].id)
    assert re.fullmatch("call_" + HEX32, r.output[0].call_id)
    assert r.output[1].call_id == "call_fixed"
    events = list(client.responses.create(model=MODEL, input="q", stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.name, e.arguments) for e in done] == [("a", '{"x": 1}'), ("b", "{}")]
    args = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(args) == '{"x": 1}{}'
    assert [e.output_index for e in done] == [0, 1]


def test_forced_tool_choice_makes_the_unscripted_model_call_that_tool(sim, client):
    tools = [
        {"type": "function", "name": "a", "parameters": {"type": "object"}},
        {"type": "function", "name": "b", "parameters": {"type": "object"}},
    ]
    named = client.responses.create(
        model=MODEL, input="q", tools=tools, tool_choice={"type": "function", "name": "b"}
    )
    assert [(o.type, o.name) for o in named.output] == [("function_call", "b")]
    required = client.responses.create(model=MODEL, input="q", tools=tools, tool_choice="required")
    assert [(o.type, o.name) for o in required.output] == [("function_call", "a")]
    # "auto" leaves it to the model: the default echo answers in text.
    auto = client.responses.create(model=MODEL, input="q", tools=tools, tool_choice="auto")
    assert [o.type for o in auto.output] == ["message"]
    # A scripted behavior still wins.
    sim.push(Reply("scripted"))
    r = client.responses.create(model=MODEL, input="q", tools=tools, tool_choice="required")
    assert r.output_text == "scripted"


@pytest.mark.parametrize(
    "xargs", [{"agentic_context": {"program_id": "p"}}, {"k": [{"a": 1}]}, "text"], ids=repr
)
def test_vllm_xargs_take_scalars_only(sim, http, xargs):
    r = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "vllm_xargs": xargs})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == 400


def test_vllm_xargs_with_scalar_values_and_json_strings_are_accepted(sim, http):
    xargs = {"agentic_context": '{"program_id": "p"}', "n": 1, "f": 0.5, "l": ["a", 2]}
    r = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "vllm_xargs": xargs})
    assert r.status_code == 200, r.text


# --- failure behaviors ----------------------------------------------------------------


def test_fail_returns_the_given_status_and_body(sim, client, http):
    sim.push(Fail(503, {"error": {"message": "busy"}}, headers={"retry-after": "1"}))
    r = http.post("/v1/responses", json={"input": "x"})
    assert r.status_code == 503 and r.json() == {"error": {"message": "busy"}}
    assert r.headers["retry-after"] == "1"
    sim.push(Fail(500))
    with pytest.raises(openai.InternalServerError) as info:
        client.responses.create(model=MODEL, input="x")
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "InternalServerError"
    assert sim.last().outcome == "failed"


def test_malformed_sends_the_given_answer_as_is(sim, http):
    sim.push(Malformed(body={"output": "x", "status": 7}))
    r = http.post("/v1/responses", json={"model": MODEL, "input": "x"})
    assert r.status_code == 200 and r.json() == {"output": "x", "status": 7}
    sim.push(Malformed(events=[{"type": "response.completed", "response": "oops"}, "{no"]))
    r = http.post("/v1/responses", json={"model": MODEL, "input": "x", "stream": True})
    assert r.status_code == 200
    assert r.text == 'data: {"type":"response.completed","response":"oops"}\n\ndata: {no\n\n'
    assert sim.last().outcome == "malformed"
    assert behavior_from_json({"kind": "malformed", "body": "x"}) == Malformed(body="x")


def test_disconnect_mid_stream_makes_the_sdk_raise(sim, client):
    sim.push(Disconnect(after_events=3))
    seen = []
    with pytest.raises(openai.APIConnectionError):
        for event in client.responses.create(model=MODEL, input="q", stream=True):
            seen.append(event.type)
    assert seen == ["response.created", "response.in_progress", "response.output_item.added"]
    assert sim.last().outcome == "disconnected"
    assert sim.aborted == []


def test_disconnect_never_sends_the_terminal_event(sim, http):
    sim.push(Disconnect(after_events=10_000, reply=Reply("hi")))
    body = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        http.stream("POST", "/v1/responses", json={"input": "q", "stream": True}) as r,
    ):
        for chunk in r.iter_bytes():
            body += chunk
    assert b"response.output_item.done" in body
    assert b"response.completed" not in body


def test_disconnect_without_a_response(sim, client):
    sim.push(Disconnect())
    with pytest.raises(openai.APIConnectionError):
        client.responses.create(model=MODEL, input="q")
    sim.push(Disconnect())
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "q"}])
    assert [r.outcome for r in sim.requests()] == ["disconnected", "disconnected"]


def test_hang_is_recorded_as_aborted_when_the_client_times_out(sim, client):
    sim.push(Hang())
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.2).responses.create(model=MODEL, input="q")
    assert sim.wait_aborted(1, timeout=3)
    assert sim.aborted[0].path == "/v1/responses"
    sim.push(Hang(after_events=2))
    seen = []
    with pytest.raises(openai.APITimeoutError):
        for event in client.with_options(timeout=0.3).responses.create(
            model=MODEL, input="q", stream=True
        ):
            seen.append(event.type)
    assert seen == ["response.created", "response.in_progress"]
    assert sim.wait_aborted(2, timeout=3)


def test_stop_releases_a_hanging_request():
    sim = SimServer().start()
    sim.push(Hang())
    errors: list[BaseException] = []

    def call() -> None:
        try:
            httpx.post(sim.url + "/v1/responses", json={"input": "q"}, timeout=10)
        except httpx.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert sim.wait_for(lambda: len(sim.state.recordings) == 1)
    started = time.monotonic()
    sim.stop()
    caller.join(5)
    assert time.monotonic() - started < 2
    assert len(errors) == 1
    assert sim.requests()[0].outcome == "shutdown"


def test_client_abort_mid_stream_is_recorded(sim, client):
    sim.push(Reply("x " * 50, event_delay=0.02))
    stream = client.responses.create(model=MODEL, input="q", stream=True)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    assert sim.wait_aborted(1, timeout=3)
    rec = sim.aborted[0]
    assert rec.outcome == "aborted" and 4 <= rec.events_sent < 20


def test_stream_error_event(sim, client):
    sim.push(StreamError(after_events=2, message="engine died"))
    events = list(client.responses.create(model=MODEL, input="q", stream=True))
    assert [e.type for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1].message == "engine died" and events[-1].sequence_number == 2
    sim.push(StreamError(after_events=1))
    with pytest.raises(openai.APIError):
        list(
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "q"}], stream=True
            )
        )
    sim.push(StreamError())
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model=MODEL, input="q")


def test_delays(sim, client):
    sim.push(Reply("a", delay=0.2))
    started = time.monotonic()
    client.responses.create(model=MODEL, input="q")
    assert time.monotonic() - started >= 0.2
    sim.push(Reply("a", event_delay=0.03))
    started = time.monotonic()
    events = list(client.responses.create(model=MODEL, input="q", stream=True))
    assert time.monotonic() - started >= 0.03 * (len(events) - 1)


# --- Chat Completions -----------------------------------------------------------------


def test_chat_json_and_stream_with_cached_tokens(sim, client):
    messages = [{"role": "user", "content": "hello " * 20}]
    salt = {"cache_salt": "t"}
    first = client.chat.completions.create(model=MODEL, messages=messages, extra_body=salt)
    assert re.fullmatch("chatcmpl-" + HEX32, first.id)
    assert first.choices[0].message.content.startswith("echo: hello hello")
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    follow = [
        *messages,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "next"},
    ]
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=follow,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=salt,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("echo: next")
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    seen = first.usage.prompt_tokens + first.usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens == seen // BLOCK * BLOCK


def test_chat_tool_calls_reasoning_and_length(sim, client):
    sim.push(ToolCalls([Call("f", {"k": "v"}), Call("g")], reasoning="plan"))
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "q"}])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [(t.function.name, t.function.arguments) for t in choice.message.tool_calls] == [
        ("f", '{"k": "v"}'),
        ("g", "{}"),
    ]
    assert choice.message.tool_calls[0].id.startswith("chatcmpl-tool-")
    assert choice.message.model_extra["reasoning"] == "plan"
    sim.push(ToolCalls([Call("f", {"k": "v"}), Call("g")]))
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "q"}], stream=True
        )
    )
    heads = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or []) if tc.function.name]
    assert [(h.index, h.function.name) for h in heads] == [(0, "f"), (1, "g")]
    sim.push(Reply("one two three"))
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "q"}], max_tokens=2
    )
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content == "one "
    assert r.usage.completion_tokens == 2


# --- recording ------------------------------------------------------------------------


def test_recordings_capture_headers_and_raw_body(sim, http):
    raw = b'{"input": [{"role": "user", "content": "hi"}],  "store": false, "cache_salt": "s1"}'
    r = http.post(
        "/v1/responses",
        content=raw,
        headers={"content-type": "application/json", "X-Session-ID": "sess-1"},
    )
    assert r.status_code == 200
    rec = sim.last("/v1/responses")
    assert rec.body == raw
    assert rec.json["store"] is False and rec.json["cache_salt"] == "s1"
    assert rec.headers["x-session-id"] == "sess-1" == rec.headers["X-SESSION-ID"]
    assert "X-Session-ID" in rec.headers
    assert rec.method == "POST" and rec.outcome == "completed" and not rec.aborted
    http.get("/v1/models")
    assert sim.calls("/v1/responses") == 1 and sim.calls("/v1/models") == 1
    assert [r.path for r in sim.requests()] == ["/v1/responses", "/v1/models"]
    assert sim.requests("/v1/models")[0].json is None


def test_reset_clears_everything(sim, client):
    client.responses.create(model=MODEL, input="a " * 40)
    sim.push(Reply("x"))
    assert sim.state.cache.block_count() > 0
    sim.reset()
    assert sim.requests() == [] and sim.state.pending() == 0
    assert sim.state.cache.block_count() == 0


def test_replica_header_and_config_overrides():
    config = SimConfig(model="m2", replica="r1", block_size=4, default_reply_tokens=7)
    with SimServer(config) as sim, httpx.Client(base_url=sim.url) as http:
        r = http.post("/v1/responses", json={"input": "q"})
        assert r.headers["x-upstream-replica"] == "r1"
        assert r.json()["usage"]["output_tokens"] == 8  # 7 + <|im_end|>
        assert sim.state.config.block_size == 4


def test_standalone_process_with_control_api():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.upstream_sim", "--port", "0", "--model", "solo"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://\S+", line)
        assert found is not None, line
        url = found.group(0)
        with httpx.Client(base_url=url, timeout=5) as http:
            deadline = time.monotonic() + 10
            while True:
                try:
                    if http.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            push = {"kind": "tool_calls", "calls": [{"name": "f", "arguments": {"a": 1}}]}
            assert http.post("/_sim/push", content=json.dumps(push)).json() == {"pending": 1}
            r = http.post("/v1/responses", json={"model": "solo", "input": "q"}).json()
            assert r["output"][0]["name"] == "f"
            recorded = http.get("/_sim/requests").json()
            [summary] = [s for s in recorded if s["path"] == "/v1/responses"]
            generated = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
            assert summary["outcome"] == "completed"
            assert summary["output_tokens"] == len(split(generated)) + 1
            assert http.get("/_sim/stats").json()["calls"]["/v1/responses"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_recordings_can_be_bounded_to_the_latest():
    state = SimState(SimConfig(max_recordings=2))
    for path in ("/a", "/b", "/c"):
        state.record(
            method="POST", path=path, query="", headers=[], body=b"{}", parsed={}, client=None
        )
    kept = state.requests()
    assert [(r.path, r.index) for r in kept] == [("/b", 1), ("/c", 2)]
    assert state.calls["/a"] == 1  # counts still cover every request
