"""The Responses API through the official SDK: create, stream, retrieve, replay, delete,
input items, chains, forks and function-call round trips (on SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai import BadRequestError, NotFoundError, OpenAI
from openai.types.responses import (
    ParsedResponseOutputMessage,
    ResponseInputParam,
    ResponseOutputMessage,
    ToolParam,
)

from tests.conftest import RunningServer
from tests.support.strict import RESPONSE_KEYS
from tests.support.tenants import create_tenant
from tests.support.typed import message_text, narrow, unchecked, usage_of
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

# What strict clients require on every Response object (tests/support/strict.py).
STRICT_FIELDS = set(RESPONSE_KEYS)


def upstream_calls(sim: SimServer) -> list[dict[str, Any]]:
    return [r.json for r in sim.requests("/v1/responses")]


def test_create_returns_a_complete_response_object(
    client: OpenAI, server: RunningServer, sim: SimServer
) -> None:
    sim.push(Reply("Hello there."))
    response = client.responses.create(
        model=sim.config.model,
        input="Say hello",
        instructions="Be brief.",
        metadata={"case": "create"},
    )
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text == "Hello there."
    assert narrow(response.output[0], ResponseOutputMessage).id.startswith("msg_")
    assert response.instructions == "Be brief."
    assert response.metadata == {"case": "create"}
    assert response.completed_at is not None and response.completed_at >= response.created_at
    raw = response.model_dump()
    assert set(raw) >= STRICT_FIELDS
    usage = raw["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    # Retrieval returns the same object the create call did.
    assert client.responses.retrieve(response.id).model_dump() == raw


def test_upstream_request_is_stateless_salted_and_carries_lineage(
    client: OpenAI, sim: SimServer
) -> None:
    response = client.responses.create(
        model=sim.config.model,
        input="hi",
        prompt_cache_key="pck-1",
        extra_body={"cache_salt": "client-chosen", "some_future_field": {"x": 1}},
    )
    sent = sim.last("/v1/responses")
    body = sent.json
    # A client waiting for one JSON object gets one from the upstream too.
    assert body["store"] is False and body["stream"] is False
    assert body["cache_salt"] != "client-chosen" and len(body["cache_salt"]) == 64
    assert body["prompt_cache_key"] == "pck-1"
    assert body["some_future_field"] == {"x": 1}
    assert "previous_response_id" not in body and "metadata" not in body
    assert sent.headers["x-continuation-id"] == response.id
    assert sent.headers["x-session-id"].startswith("sess_")


def test_stream_relays_events_with_our_ids_and_sequence_numbers(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("one two three four"))
    with client.responses.stream(model=sim.config.model, input="count") as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))
    item_ids = {getattr(e, "item_id", None) for e in events} - {None}
    assert item_ids == {narrow(final.output[0], ResponseOutputMessage).id}
    assert all(e.response.id == final.id for e in events if hasattr(e, "response"))
    stored = client.responses.retrieve(final.id)
    # (the SDK's stream helper decorates parsed content, so compare around that)
    assert stored.model_dump(exclude={"output"}) == final.model_dump(exclude={"output"})
    assert [narrow(o, ResponseOutputMessage).id for o in stored.output] == [
        narrow(o, ParsedResponseOutputMessage).id for o in final.output
    ]
    assert stored.output_text == final.output_text == "one two three four"


def test_stream_replay_from_storage(client: OpenAI, server: RunningServer, sim: SimServer) -> None:
    sim.push(Reply("replay me please"))
    live = [
        e.model_dump()
        for e in client.responses.create(model=sim.config.model, input="x", stream=True)
    ]
    response_id = live[-1]["response"]["id"]
    replay = client.responses.retrieve(response_id, stream=True)
    assert [e.model_dump() for e in replay] == live
    after = client.responses.retrieve(response_id, stream=True, starting_after=3)
    assert [e.model_dump() for e in after] == live[4:]


def test_replay_of_a_non_streamed_response_is_rebuilt(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("rebuilt text"))
    created = client.responses.create(model=sim.config.model, input="x")
    events = list(client.responses.retrieve(created.id, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert events[-1].response.model_dump() == created.model_dump()
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "rebuilt text"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_chain_rehydrates_prior_input_and_output_verbatim(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("first answer"), Reply("second answer"), Reply("third answer"))
    first = client.responses.create(
        model=sim.config.model, input="question one " * 20, instructions="system rules"
    )
    second = client.responses.create(
        model=sim.config.model, input="question two", previous_response_id=first.id
    )
    third = client.responses.create(
        model=sim.config.model, input="question three", previous_response_id=second.id
    )
    bodies = [r.body for r in sim.requests("/v1/responses")]
    calls = [orjson.loads(b) for b in bodies]
    # instructions are not inherited
    assert calls[0]["instructions"] == "system rules"
    assert "instructions" not in calls[1]
    for earlier, later, response in ((0, 1, first), (1, 2, second)):
        previous_input = _raw_input_items(bodies[earlier])
        later_input = _raw_input_items(bodies[later])
        output_items = len(response.output)
        # Byte-exactness: prior input, then prior output, then the new input.
        assert later_input[: len(previous_input)] == previous_input
        replayed_output = [
            orjson.loads(i)
            for i in later_input[len(previous_input) : len(previous_input) + output_items]
        ]
        raw = client.responses.with_raw_response.retrieve(response.id).http_response.json()
        assert replayed_output == raw["output"]
        assert len(later_input) == len(previous_input) + output_items + 1
    # Session affinity: every turn of the chain carries the root's session id.
    sessions = {r.headers["x-session-id"] for r in sim.requests("/v1/responses")}
    assert len(sessions) == 1
    assert third.previous_response_id == second.id


def _raw_input_items(body: bytes) -> list[bytes]:
    """The raw bytes of each element of the body's input array."""
    start = body.index(b',"input":[') + len(b',"input":[')
    items, depth, begin, in_string, escaped = [], 0, start, False, False
    for position in range(start, len(body)):
        char = body[position : position + 1]
        if in_string:
            if escaped:
                escaped = False
            elif char == b"\\":
                escaped = True
            elif char == b'"':
                in_string = False
            continue
        if char == b'"':
            in_string = True
        elif char in (b"{", b"["):
            depth += 1
        elif char in (b"}", b"]"):
            if depth == 0:
                if position > begin:
                    items.append(body[begin:position])
                return items
            depth -= 1
        elif char == b"," and depth == 0:
            items.append(body[begin:position])
            begin = position + 1
    raise AssertionError("unterminated input array")


def test_continuation_hits_the_prefix_cache_and_tenants_are_isolated(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    long_prompt = "the quick brown fox jumps over the lazy dog " * 30
    first = client.responses.create(model=sim.config.model, input=long_prompt)
    second = client.responses.create(
        model=sim.config.model, input="and then?", previous_response_id=first.id
    )
    recorded = sim.requests("/v1/responses")
    first_prompt_tokens = recorded[0].prompt_tokens
    block = sim.config.block_size
    assert usage_of(first).input_tokens == first_prompt_tokens
    # Everything the first turn saw (prompt and answer) is a reusable prefix now.
    reusable = first_prompt_tokens + usage_of(first).output_tokens
    assert (
        usage_of(second).input_tokens_details.cached_tokens
        >= (first_prompt_tokens // block) * block
    )
    assert usage_of(second).input_tokens_details.cached_tokens == min(
        (reusable // block) * block, ((usage_of(second).input_tokens - 1) // block) * block
    )
    other = server.client(create_tenant(server.db_url))
    stranger = other.responses.create(model=sim.config.model, input=long_prompt)
    assert usage_of(stranger).input_tokens == usage_of(first).input_tokens
    assert usage_of(stranger).input_tokens_details.cached_tokens == 0
    assert sim.requests("/v1/responses")[-1].json["cache_salt"] != recorded[0].json["cache_salt"]


def test_forks_from_one_parent_both_work(client: OpenAI, sim: SimServer) -> None:
    root = client.responses.create(model=sim.config.model, input="root")
    left = client.responses.create(
        model=sim.config.model, input="left", previous_response_id=root.id
    )
    right = client.responses.create(
        model=sim.config.model, input="right", previous_response_id=root.id
    )
    left2 = client.responses.create(
        model=sim.config.model, input="left again", previous_response_id=left.id
    )
    assert left2.status == right.status == "completed"
    last = sim.last("/v1/responses").json
    texts = [orjson.dumps(i) for i in last["input"]]
    assert b"right" not in b"".join(texts)
    assert b"left again" in texts[-1]


def test_function_call_round_trip(client: OpenAI, sim: SimServer) -> None:
    # The SDK's FunctionToolParam requires "strict", which the API takes as optional.
    tools: list[ToolParam] = [
        {  # type: ignore[list-item]
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    sim.push(
        ToolCalls([Call("get_weather", {"city": "Paris"}, call_id="call_abc")]),
        Reply("It is sunny."),
    )
    first = client.responses.create(
        model=sim.config.model,
        input="weather?",
        tools=tools,
        tool_choice="auto",
        parallel_tool_calls=False,
    )
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.id is not None and call.id.startswith("fc_") and call.call_id == "call_abc"
    sent = sim.last("/v1/responses").json
    assert sent["tools"] == tools and sent["parallel_tool_calls"] is False
    second = client.responses.create(
        model=sim.config.model,
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": "call_abc", "output": "sunny"}],
    )
    assert second.output_text == "It is sunny."
    replayed = sim.last("/v1/responses").json["input"]
    assert replayed[-2]["type"] == "function_call" and replayed[-2]["id"] == call.id
    assert replayed[-1]["type"] == "function_call_output"
    with pytest.raises(BadRequestError) as error:
        client.responses.create(
            model=sim.config.model,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_unknown", "output": "x"}],
        )
    assert error.value.code == "tool_call_not_found"


def test_parallel_tool_calls_are_stored_verbatim(client: OpenAI, sim: SimServer) -> None:
    sim.push(ToolCalls([Call("a", {"n": 1}), Call("b", {"n": 2})]))
    response = client.responses.create(
        model=sim.config.model,
        input="two calls",
        # Bare function tools, as clients send them (the SDK's type requires more).
        tools=[
            unchecked({"type": "function", "name": "a"}),
            unchecked({"type": "function", "name": "b"}),
        ],
    )
    calls = [o for o in response.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["a", "b"]
    assert len({c.id for c in calls}) == 2
    assert client.responses.retrieve(response.id).model_dump() == response.model_dump()


def test_store_false_persists_nothing(client: OpenAI, sim: SimServer) -> None:
    response = client.responses.create(model=sim.config.model, input="secret", store=False)
    # The SDK's Response leaves out "store", which the API returns.
    assert response.status == "completed" and response.store is False  # type: ignore[attr-defined]
    with pytest.raises(NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(NotFoundError) as error:
        client.responses.create(
            model=sim.config.model, input="more", previous_response_id=response.id
        )
    assert error.value.code == "previous_response_not_found"
    assert error.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_stateless_history_resends_keep_one_session(client: OpenAI, sim: SimServer) -> None:
    history: list[Any] = [
        {"type": "message", "role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": "task"},
    ]
    sessions = []
    for turn in range(3):
        response = client.responses.create(
            model=sim.config.model,
            input=history,
            store=False,
            tools=[
                {"type": "web_search"},
                {"type": "namespace", "name": "ns", "description": "Codex's tools", "tools": []},
            ],
        )
        sessions.append(sim.last("/v1/responses").headers["x-session-id"])
        history = history + [o.model_dump(exclude_none=True) for o in response.output]
        history.append({"type": "message", "role": "user", "content": f"next {turn}"})
    assert len(set(sessions)) == 1
    assert sim.last("/v1/responses").json["tools"][1]["type"] == "namespace"


def test_other_tenants_responses_are_invisible(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    mine = client.responses.create(model=sim.config.model, input="mine")
    other = server.client(create_tenant(server.db_url))
    with pytest.raises(NotFoundError):
        other.responses.retrieve(mine.id)
    with pytest.raises(NotFoundError) as error:
        other.responses.create(model=sim.config.model, input="x", previous_response_id=mine.id)
    assert error.value.code == "previous_response_not_found"
    with pytest.raises(NotFoundError):
        other.responses.delete(mine.id)
    assert client.responses.retrieve(mine.id).id == mine.id


def test_delete_hides_the_response_but_not_its_descendants_history(
    client: OpenAI, sim: SimServer
) -> None:
    first = client.responses.create(model=sim.config.model, input="first")
    second = client.responses.create(
        model=sim.config.model, input="second", previous_response_id=first.id
    )
    client.responses.delete(first.id)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(NotFoundError):
        client.responses.create(model=sim.config.model, input="x", previous_response_id=first.id)
    with pytest.raises(NotFoundError):
        client.responses.delete(first.id)
    third = client.responses.create(
        model=sim.config.model, input="third", previous_response_id=second.id
    )
    assert third.status == "completed"
    assert len(sim.last("/v1/responses").json["input"]) == 5


def test_input_items_pagination(client: OpenAI, sim: SimServer) -> None:
    items: ResponseInputParam = [{"role": "user", "content": f"message {n}"} for n in range(5)]
    response = client.responses.create(model=sim.config.model, input=items)
    page = client.responses.input_items.list(response.id, limit=2, order="asc")
    assert [message_text(i) for i in page.data] == ["message 0", "message 1"]
    assert page.has_more is True
    # The SDK's page model leaves out first_id and last_id, which the API returns.
    assert page.first_id == page.data[0].id  # type: ignore[attr-defined]
    assert page.last_id == page.data[1].id  # type: ignore[attr-defined]
    everything = list(client.responses.input_items.list(response.id, limit=2, order="asc"))
    assert [message_text(i) for i in everything] == [f"message {n}" for n in range(5)]
    newest = client.responses.input_items.list(response.id)
    assert [message_text(i) for i in newest.data] == [f"message {n}" for n in range(4, -1, -1)]
    assert newest.has_more is False
    after = client.responses.input_items.list(response.id, after=narrow(newest.data[1].id, str))
    assert [message_text(i) for i in after.data] == ["message 2", "message 1", "message 0"]


def test_max_output_tokens_gives_incomplete(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("a long answer that will certainly be cut short by the limit"))
    response = client.responses.create(model=sim.config.model, input="x", max_output_tokens=3)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert usage_of(response).output_tokens == 3
    # An incomplete response is still a valid checkpoint.
    follow = client.responses.create(
        model=sim.config.model, input="go on", previous_response_id=response.id
    )
    assert follow.status == "completed"
