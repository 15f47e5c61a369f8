"""Compaction: the model's summary as a ``compaction`` item, asked for inline (a
``compaction_trigger`` as the last input item, as Codex does) or through
``POST /v1/responses/compact``, and replayed as a fixed message by later requests."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import APIStatusError, BadRequestError, OpenAI
from openai.types.responses import (
    EasyInputMessageParam,
    FunctionToolParam,
    ResponseCompactionCompactingEvent,
    ResponseCompactionItem,
    ResponseCompletedEvent,
    ResponseInputParam,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
)
from openai.types.responses.response_input_param import CompactionTrigger, FunctionCallOutput

from agentic_api.turns.prepare.summary_request import SUMMARY_REQUEST
from agentic_api.wire.summary import SUMMARY_HEADER
from tests.conftest import RunningServer
from tests.support.prefix_reuse import reusable_tokens, shared_prefix_tokens
from tests.support.tenants import TenantKeys
from tests.support.typed import narrow, served_cached_tokens, unchecked
from tests.support.websocket import open_socket, until_terminal
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls, tokenize

TRIGGER: CompactionTrigger = {"type": "compaction_trigger"}
# The SDK's FunctionToolParam requires "strict", which the API takes as optional.
TOOL: FunctionToolParam = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}  # type: ignore[typeddict-item]


def _user(text: str) -> EasyInputMessageParam:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _raw(client: OpenAI, **body: Any) -> dict[str, Any]:
    response = client.responses.with_raw_response.create(**body)
    data: dict[str, Any] = response.http_response.json()
    return data


# --- POST /v1/responses/compact -----------------------------------------------------


def test_compact_then_continue_from_the_summary(client: OpenAI, sim: SimServer) -> None:
    sim.push(
        Reply("first answer"),
        Reply("second answer"),
        Reply("GOAL: plan a trip. DONE: picked Paris."),
        Reply("continuing"),
    )
    first = client.responses.create(
        model=sim.config.model, input="plan a trip", instructions="be helpful"
    )
    second = client.responses.create(
        model=sim.config.model,
        input=[{"role": "user", "content": "pick a city"}],
        previous_response_id=first.id,
    )
    raw = client.responses.with_raw_response.compact(
        model=sim.config.model, previous_response_id=second.id, instructions="be helpful"
    )
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    item = compacted.output[-1]
    assert item.type == "compaction"
    assert item.encrypted_content == "GOAL: plan a trip. DONE: picked Paris."
    assert compacted.usage.input_tokens > 0
    # Kept user messages are full message items, whether they came as parts or a string.
    body = raw.http_response.json()
    for kept, text in zip(body["output"][:2], ["plan a trip", "pick a city"], strict=True):
        assert kept["id"].startswith("msg_") and kept["status"] == "completed"
        assert kept["role"] == "user"
        assert kept["content"] == [{"type": "input_text", "text": text}]

    summary_call = sim.requests("/v1/responses")[-1].json
    assert summary_call["stream"] is False and summary_call["store"] is False
    assert summary_call["tool_choice"] == "none"
    assert summary_call["input"][-1]["content"][0]["text"] == SUMMARY_REQUEST
    # The summary request extends the chain's own history, so its prefix is reusable.
    second_output = client.responses.with_raw_response.retrieve(second.id).http_response.json()
    expected = sim.requests("/v1/responses")[1].json["input"] + second_output["output"]
    assert summary_call["input"][:-1] == expected
    assert served_cached_tokens(sim.requests("/v1/responses")[-1]) > 0

    # A client carries the window on as it was sent.
    fresh = client.responses.create(
        model=sim.config.model, input=[*body["output"], {"role": "user", "content": "go on"}]
    )
    sent = sim.last("/v1/responses").json["input"]
    assert all(i.get("type") != "compaction" for i in sent)
    assert sent[2]["content"][0]["text"] == SUMMARY_HEADER + item.encrypted_content
    # Stored verbatim: the input items list shows the compaction item as given.
    stored = client.responses.input_items.list(fresh.id, order="asc")
    assert stored.data[2].type == "compaction"
    assert stored.data[2].encrypted_content == item.encrypted_content


def test_compaction_items_need_content(client: OpenAI, sim: SimServer) -> None:
    with pytest.raises(BadRequestError) as error:
        client.responses.create(
            model=sim.config.model, input=[unchecked({"type": "compaction", "id": "cmp_1"})]
        )
    assert error.value.body["param"] == "input[0].encrypted_content"  # type: ignore[index]


# --- compaction_trigger on /v1/responses ----------------------------------------------


def test_trigger_compacts_the_chain_and_the_window_reuses_the_summary_prefix(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(
        ToolCalls([Call("lookup", {"q": "paris"}, call_id="call_1")]),
        Reply("GOAL: a trip. FOUND: Paris is open."),
        Reply("booked"),
        Reply("paid"),
    )
    task = _user("plan a trip and book it")
    first = client.responses.create(
        model=sim.config.model, instructions="be brief", tools=[TOOL], input=[task]
    )
    call_output: FunctionCallOutput = {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "open",
    }
    compacted = _raw(
        client,
        model=sim.config.model,
        instructions="be brief",
        tools=[TOOL],
        previous_response_id=first.id,
        input=[call_output, TRIGGER],
    )
    # The client sees one compaction item, and the SDK reads the object as a Response.
    assert compacted["status"] == "completed"
    assert [item["type"] for item in compacted["output"]] == ["compaction"]
    item = compacted["output"][0]
    assert item["encrypted_content"] == "GOAL: a trip. FOUND: Paris is open."
    assert item["id"].startswith("cmp_")
    parsed = client.responses.retrieve(compacted["id"])
    assert parsed.output[0].type == "compaction"
    assert compacted["usage"]["output_tokens"] > 0

    first_call, summary_call = sim.requests("/v1/responses")
    # The summary request is the continuation the trigger replaced, plus the question:
    # same instructions, tools, salt and session, the history's bytes, no trigger.
    body = summary_call.json
    history = [*first_call.json["input"], *_output(client, first.id)]
    assert body["input"][: len(history)] == history
    sent_output = {k: v for k, v in body["input"][len(history)].items() if k != "id"}
    assert sent_output == call_output and len(body["input"]) == len(history) + 2
    assert body["input"][-1]["content"][0]["text"] == SUMMARY_REQUEST
    assert body["tool_choice"] == "none"
    assert body["tools"] == first_call.json["tools"]
    assert body["cache_salt"] == first_call.json["cache_salt"]
    assert summary_call.headers["x-session-id"] == first_call.headers["x-session-id"]
    # Every block of the first turn's prompt (and of its answer, replayed verbatim).
    assert served_cached_tokens(summary_call) >= reusable_tokens(first_call, summary_call, 16) > 0

    # The compacted window: the kept user message, then the item, then the next input.
    window: ResponseInputParam = [task, item]
    booked = client.responses.create(
        model=sim.config.model,
        instructions="be brief",
        tools=[TOOL],
        input=[*window, _user("book it")],
    )
    after = sim.last("/v1/responses")
    sent = after.json["input"]
    assert _without_id(sent[0]) == task
    assert sent[1] == _user(SUMMARY_HEADER + item["encrypted_content"])
    # Its first turn reuses everything it shares with the summary request...
    assert served_cached_tokens(after) == reusable_tokens(summary_call, after, 16)
    assert served_cached_tokens(after) >= shared_prefix_tokens(first_call, after) // 16 * 16
    # ...and the next one the whole window through the summary message.
    client.responses.create(
        model=sim.config.model,
        instructions="be brief",
        tools=[TOOL],
        previous_response_id=booked.id,
        input=[_user("pay")],
    )
    paid = sim.last("/v1/responses")
    assert served_cached_tokens(paid) >= reusable_tokens(after, paid, 16)
    assert after.prompt_text is not None
    through_summary = after.prompt_text.index(item["encrypted_content"]) + len(
        item["encrypted_content"]
    )
    assert (
        served_cached_tokens(paid) >= len(tokenize(after.prompt_text[:through_summary])) // 16 * 16
    )


def _without_id(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != "id"}


def _output(client: OpenAI, response_id: str) -> list[dict[str, Any]]:
    stored = client.responses.with_raw_response.retrieve(response_id).http_response.json()
    output: list[dict[str, Any]] = stored["output"]
    return output


def test_continuing_a_compaction_replays_the_summary_not_the_trigger(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("hello"), Reply("NOTES: said hello."), Reply("again"))
    first = client.responses.create(model=sim.config.model, input="hi")
    compacted = client.responses.create(
        model=sim.config.model, previous_response_id=first.id, input=[TRIGGER]
    )
    client.responses.create(model=sim.config.model, previous_response_id=compacted.id, input="more")
    sent = sim.last("/v1/responses").json["input"]
    types = [i.get("type") for i in sent]
    assert "compaction_trigger" not in types and "compaction" not in types
    assert sent[-2] == _user(SUMMARY_HEADER + "NOTES: said hello.")
    # Stored as sent: the trigger is the compacting turn's input item.
    items = client.responses.input_items.list(compacted.id)
    assert [i.type for i in items.data] == ["compaction_trigger"]


def test_trigger_stream_shows_the_item_not_the_summary_text(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("hello"), Reply("NOTES: the user greeted us."))
    first = client.responses.create(model=sim.config.model, input="hi")
    stream = client.responses.create(
        model=sim.config.model, previous_response_id=first.id, input=[TRIGGER], stream=True
    )
    events = list(stream)
    kinds = [e.type for e in events]
    compacting = kinds.count("response.compaction.compacting")
    assert compacting > 0
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.compaction.compacting"] * compacting,
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = narrow(events[2], ResponseOutputItemAddedEvent)
    done = narrow(events[-2], ResponseOutputItemDoneEvent)
    completed = narrow(events[-1], ResponseCompletedEvent)
    added_item = narrow(added.item, ResponseCompactionItem)
    done_item = narrow(done.item, ResponseCompactionItem)
    assert added_item.encrypted_content == ""
    assert done_item.encrypted_content == "NOTES: the user greeted us."
    compacting_event = narrow(events[3], ResponseCompactionCompactingEvent)
    assert {added_item.id, done_item.id} == {compacting_event.item_id}
    assert narrow(completed.response.output[0], ResponseCompactionItem).id == done_item.id
    assert sim.last("/v1/responses").json["stream"] is True
    # The stored stream replays the same events.
    replay = list(client.responses.retrieve(completed.response.id, stream=True))
    assert [e.type for e in replay] == kinds


def test_trigger_over_the_websocket_with_store_false(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("hello"), Reply("NOTES: greeted."), Reply("after"))
    model = sim.config.model
    with open_socket(server, tenant) as socket:
        socket.send(
            json.dumps({"type": "response.create", "model": model, "input": "hi", "store": False})
        )
        first = until_terminal(socket)[-1]["response"]
        socket.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": model,
                    "store": False,
                    "previous_response_id": first["id"],
                    "input": [TRIGGER],
                }
            )
        )
        events = until_terminal(socket)
        assert events[-1]["type"] == "response.completed"
        item = events[-1]["response"]["output"][0]
        assert item["type"] == "compaction" and item["encrypted_content"] == "NOTES: greeted."
        # The connection keeps the compacting turn, so it can be continued by id.
        socket.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": model,
                    "store": False,
                    "previous_response_id": events[-1]["response"]["id"],
                    "input": "go on",
                }
            )
        )
        assert until_terminal(socket)[-1]["type"] == "response.completed"
    sent = sim.last("/v1/responses").json["input"]
    assert _user(SUMMARY_HEADER + "NOTES: greeted.") in sent


def test_trigger_must_be_the_last_input_item(client: OpenAI, sim: SimServer) -> None:
    cases: list[ResponseInputParam] = [[TRIGGER, _user("after")], [TRIGGER, TRIGGER]]
    for bad in cases:
        with pytest.raises(BadRequestError) as error:
            client.responses.create(model=sim.config.model, input=bad)
        assert error.value.body["param"] == "input[0]"  # type: ignore[index]
        assert error.value.body["code"] == "invalid_value"  # type: ignore[index]
    assert sim.calls("/v1/responses") == 0


def test_a_model_that_writes_no_summary_fails_the_turn(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("hello"), ToolCalls([Call("lookup", {})]))
    first = client.responses.create(model=sim.config.model, input="hi")
    with pytest.raises(APIStatusError) as error:
        client.responses.create(
            model=sim.config.model, previous_response_id=first.id, input=[TRIGGER]
        )
    assert error.value.status_code == 502
    assert "no summary" in error.value.message


def test_a_compaction_item_goes_upstream_as_its_summary_message(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    # The simulator refuses compaction items as vLLM does (400), so a completed turn
    # means the item was sent as the message it stands for.
    sim.push(Reply("fine"))
    response = httpx.post(
        f"{server.url}/v1/responses",
        headers={"authorization": f"Bearer {tenant.api_key}"},
        json={
            "model": sim.config.model,
            "input": [_user("x"), {"type": "compaction", "encrypted_content": "notes"}],
        },
        timeout=20,
    )
    assert response.status_code == 200, response.text
    assert sim.last("/v1/responses").outcome == "completed"
