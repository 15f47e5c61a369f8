"""``context_management`` compaction by threshold (SQLite and PostgreSQL): a turn whose
input passes ``compact_threshold`` is compacted first (the summary request of
``compaction_trigger``), then answered on the compacted window, in one response whose
output is the ``compaction`` item then the answer; stored, replayed and continued from the
item (chains, conversations, a WebSocket connection's own turns)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI
from openai.types.responses import (
    FunctionToolParam,
    ResponseCompactionItem,
    ResponseCompletedEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputMessage,
)
from openai.types.responses.response_create_params import ContextManagement

from agentic_api.turns.prepare.summary_request import SUMMARY_REQUEST
from agentic_api.wire.summary import SUMMARY_HEADER
from tests.conftest import RunningServer, running_server
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.support.typed import narrow
from tests.support.websocket import open_socket, until_terminal
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

MODEL = "sim-model"
# About 1,300 tokens by any count (the simulator's tokenizer, or bytes / 4): past 1,000.
LONG = "The quarterly report lists every shipment by port and date. " * 90
COMPACT: list[ContextManagement] = [{"type": "compaction", "compact_threshold": 1000}]
NEVER: list[ContextManagement] = [{"type": "compaction", "compact_threshold": 1_000_000}]
TOOL: FunctionToolParam = {
    "type": "function",
    "name": "lookup",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    "strict": False,
}
SUMMARY = "NOTES: a quarterly shipment report was shared."


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _sent_texts(body: dict[str, Any]) -> list[str]:
    """Each input item's text as the upstream got it (message parts joined)."""
    texts: list[str] = []
    for item in body["input"]:
        parts = item.get("content")
        if isinstance(parts, list):
            texts.append("".join(str(part.get("text", "")) for part in parts))
        else:
            texts.append(str(parts))
    return texts


@pytest.fixture
def admin(server: RunningServer) -> Iterator[httpx.Client]:
    key = create_admin_key(server.db_url)
    with httpx.Client(
        base_url=f"{server.url}/admin/v1", headers={"Authorization": f"Bearer {key}"}, timeout=20
    ) as http:
        yield http


def test_a_turn_past_the_threshold_compacts_then_answers(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    sim.push(Reply("noted"), Reply(SUMMARY), Reply("ship it on Monday"), Reply("then invoice"))
    first = client.responses.create(model=MODEL, input=LONG)
    sim.state.clear_recordings()
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input="what next?", context_management=COMPACT
    )
    assert second.status == "completed"
    assert [item.type for item in second.output] == ["compaction", "message"]
    item = narrow(second.output[0], ResponseCompactionItem)
    assert item.encrypted_content == SUMMARY and item.id.startswith("cmp_")
    assert second.output_text == "ship it on Monday"
    # Two rounds upstream: the summary request (the whole history, then the question)...
    summary_call, answer_call = sim.requests("/v1/responses")
    assert LONG in _sent_texts(summary_call.json)[0]
    assert _sent_texts(summary_call.json)[-1] == SUMMARY_REQUEST
    assert summary_call.json["tool_choice"] == "none"
    # ...then the answer on the compacted window: the summary, then the new input.
    assert _sent_texts(answer_call.json) == [SUMMARY_HEADER + SUMMARY, "what next?"]
    assert "context_management" not in answer_call.json
    # Usage covers both model calls.
    assert second.usage is not None
    assert second.usage.input_tokens == (summary_call.prompt_tokens or 0) + (
        answer_call.prompt_tokens or 0
    )
    # Stored as answered.
    stored = client.responses.retrieve(second.id)
    assert [i.type for i in stored.output] == ["compaction", "message"]

    # The continuation's window starts at the item: the long report is gone from it.
    sim.state.clear_recordings()
    third = client.responses.create(
        model=MODEL, previous_response_id=second.id, input="and then?", context_management=COMPACT
    )
    assert [i.type for i in third.output] == ["message"] and third.output_text == "then invoice"
    (after,) = sim.requests("/v1/responses")
    assert _sent_texts(after.json) == [SUMMARY_HEADER + SUMMARY, "ship it on Monday", "and then?"]
    account = admin.get(f"/responses/{third.id}/token_account").json()["account"]
    assert account["cause"] == "context_compacted", account
    assert "compacted its context" in account["explanation"]


def test_a_tool_output_past_the_threshold_keeps_its_call(client: OpenAI, sim: SimServer) -> None:
    sim.push(
        ToolCalls([Call("lookup", {"q": "port"}, call_id="call_1")]), Reply(SUMMARY), Reply("done")
    )
    first = client.responses.create(model=MODEL, input=LONG, tools=[TOOL])
    sim.state.clear_recordings()
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "Rotterdam"}],
        context_management=COMPACT,
    )
    assert [i.type for i in second.output] == ["compaction", "message"]
    answer = sim.last("/v1/responses").json["input"]
    assert [i["type"] for i in answer] == ["message", "function_call", "function_call_output"]
    assert answer[1]["call_id"] == answer[2]["call_id"] == "call_1"


def test_a_turn_under_the_threshold_just_answers(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("noted"), Reply("plain answer"))
    first = client.responses.create(model=MODEL, input=LONG, context_management=NEVER)
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input="next?", context_management=NEVER
    )
    assert [i.type for i in first.output] == ["message"]
    assert [i.type for i in second.output] == ["message"]
    assert sim.calls("/v1/responses") == 2
    # Without a compaction item, the whole history is sent.
    assert LONG in _sent_texts(sim.last("/v1/responses").json)[0]


def test_the_stream_shows_the_compaction_then_the_answer(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("noted"), Reply(SUMMARY), Reply("ship it"))
    first = client.responses.create(model=MODEL, input=LONG)
    events = list(
        client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input="what next?",
            context_management=COMPACT,
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert "response.compaction.compacting" in kinds
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [narrow(e, ResponseOutputItemAddedEvent) for e in events if e.type == kinds[2]]
    assert [(a.output_index, a.item.type) for a in added] == [(0, "compaction"), (1, "message")]
    # No summary text reaches the client as text deltas: only the answer's.
    deltas = "".join(getattr(e, "delta", "") for e in events if e.type.endswith("text.delta"))
    assert deltas == "ship it"
    completed = narrow(events[-1], ResponseCompletedEvent).response
    assert [i.type for i in completed.output] == ["compaction", "message"]
    narrow(completed.output[1], ResponseOutputMessage)
    replay = list(client.responses.retrieve(completed.id, stream=True))
    assert [e.type for e in replay] == kinds


def test_a_conversation_continues_from_the_compaction(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("noted"), Reply(SUMMARY), Reply("ship it"), Reply("invoice"))
    conversation = client.conversations.create()
    for text, managed in ((LONG, NEVER), ("what next?", COMPACT), ("and then?", COMPACT)):
        client.responses.create(
            model=MODEL, conversation=conversation.id, input=text, context_management=managed
        )
    assert sim.calls("/v1/responses") == 4
    last = sim.last("/v1/responses").json
    assert _sent_texts(last) == [SUMMARY_HEADER + SUMMARY, "ship it", "and then?"]
    items = client.conversations.items.list(conversation.id, order="asc")
    types = [i.type for i in items.data]
    assert types.count("compaction") == 1 and len(types) == 7


def test_over_the_websocket_with_store_false(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("noted"), Reply(SUMMARY), Reply("ship it"), Reply("invoice"))
    previous: str | None = None
    outputs: list[list[str]] = []
    with open_socket(server, tenant) as socket:
        for text, managed in ((LONG, NEVER), ("what next?", COMPACT), ("and then?", COMPACT)):
            create: dict[str, Any] = {
                "type": "response.create",
                "model": MODEL,
                "store": False,
                "input": text,
                "context_management": managed,
            }
            if previous is not None:
                create["previous_response_id"] = previous
            socket.send(json.dumps(create))
            final = until_terminal(socket)[-1]
            assert final["type"] == "response.completed", final
            previous = final["response"]["id"]
            outputs.append([item["type"] for item in final["response"]["output"]])
    assert outputs == [["message"], ["compaction", "message"], ["message"]]
    # The connection kept the compacting turn: its continuation starts at the summary.
    assert _sent_texts(sim.last("/v1/responses").json) == [
        SUMMARY_HEADER + SUMMARY,
        "ship it",
        "and then?",
    ]


@pytest.mark.parametrize(
    ("value", "param", "code"),
    [
        ({"type": "compaction", "compact_threshold": 1000}, "context_management", "invalid_type"),
        ([{"type": "truncation"}], "context_management[0].type", "unsupported_value"),
        (
            [{"type": "compaction"}],
            "context_management[0].compact_threshold",
            "missing_required_parameter",
        ),
        (
            [{"type": "compaction", "compact_threshold": 999}],
            "context_management[0].compact_threshold",
            "integer_below_min_value",
        ),
        (
            [{"type": "compaction", "compact_threshold": "2000"}],
            "context_management[0].compact_threshold",
            "invalid_type",
        ),
        (
            [{"type": "compaction", "compact_threshold": 2000, "keep": 3}],
            "context_management[0].keep",
            "unknown_parameter",
        ),
        (
            [{"type": "compaction", "compact_threshold": 2000}] * 2,
            "context_management",
            "invalid_value",
        ),
    ],
)
def test_bad_context_management_is_refused_before_the_model(
    client: OpenAI, sim: SimServer, value: object, param: str, code: str
) -> None:
    with pytest.raises(BadRequestError) as error:
        client.responses.create(model=MODEL, input="hi", extra_body={"context_management": value})
    body = error.value.body
    assert isinstance(body, dict)
    assert body["param"] == param and body["code"] == code
    assert sim.calls("/v1/responses") == 0


def test_the_render_endpoint_counts_exactly(fresh_db: str, tmp_path: Path) -> None:
    with (
        SimServer(enable_scale_out=True) as rendering,
        running_server(fresh_db, rendering, tmp_path) as custom,
    ):
        client = custom.client(create_tenant(fresh_db), timeout=20)
        rendering.push(Reply("noted"), Reply(SUMMARY), Reply("ship it"))
        first = client.responses.create(model=MODEL, input=LONG)
        rendering.state.clear_recordings()
        second = client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input="what next?",
            context_management=COMPACT,
        )
        assert rendering.calls("/v1/responses/render") == 1
        assert [i.type for i in second.output] == ["compaction", "message"]
