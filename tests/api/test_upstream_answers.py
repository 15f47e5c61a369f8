"""A malformed upstream answer ends the turn as a stored ``failed`` response (code
``upstream_invalid_response``), never as a checkpoint, streamed or not, on both
databases. The simulator plays the broken answers (``Malformed``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import APIStatusError, BadRequestError, OpenAI
from openai.types.responses import ResponseErrorEvent, ResponseFailedEvent
from openai.types.responses.tool_param import Mcp

from tests.conftest import app_server
from tests.support.mcp_server import McpTestServer, start_mcp_server
from tests.support.tenants import create_tenant
from tests.support.typed import narrow
from tests.upstream_sim import Call, Malformed, SimServer, ToolCalls

MODEL = "sim-model"
SNAPSHOT = {"id": "resp_up", "object": "response", "status": "in_progress", "output": []}
OPENING = [
    {"type": "response.created", "response": SNAPSHOT},
    {"type": "response.in_progress", "response": SNAPSHOT},
]


def final(**fields: Any) -> dict[str, Any]:
    return {**SNAPSHOT, "status": "completed", "output": [], **fields}


def completed(response: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": response}


MESSAGE = {
    "id": "msg_up",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}],
}

# Streamed answers (each ends the stream with what looks like a terminal event).
STREAMED: dict[str, list[Any]] = {
    "completed response is a string": [*OPENING, completed("oops")],
    "completed response is empty": [*OPENING, completed({})],
    "delta for an item never announced": [
        *OPENING,
        {
            "type": "response.output_text.delta",
            "item_id": "msg_nope",
            "output_index": 0,
            "content_index": 0,
            "delta": "hi",
        },
        completed(final(output=[MESSAGE])),
    ],
    "delta naming an unknown item id": [
        *OPENING,
        {"type": "response.output_text.delta", "item_id": "msg_nope", "delta": "x"},
        completed(final(output=[MESSAGE])),
    ],
    "event that is not an object": [*OPENING, "[1, 2]", completed(final())],
    "event that is not JSON": [*OPENING, "{not json", completed(final())],
    # Bytes that are not UTF-8 in an event otherwise taken as it is: JSON is UTF-8.
    "event that is not UTF-8": [
        *OPENING,
        b'{"type":"response.in_progress","response":{"id":"resp_up","note":"\xff"}}',
        completed(final()),
    ],
    "output item without a type": [*OPENING, completed(final(output=[{"id": "x"}]))],
    "output item type with NUL": [
        *OPENING,
        completed(final(output=[{**MESSAGE, "type": "mess\x00age"}])),
    ],
    "token count no column holds": [
        *OPENING,
        completed(final(output=[MESSAGE], usage={"input_tokens": 2**40, "output_tokens": 1})),
    ],
    "status is a number": [*OPENING, completed(final(status=7))],
}
# Non-streamed answers (the JSON body of a 200).
ANSWERED: dict[str, Any] = {
    "output is a string and status a number": {"output": "x", "status": 7},
    "empty object": {},
    "not an object": [1, 2],
    "not JSON": "{not json",
    "function call without a name": final(
        output=[{"type": "function_call", "arguments": "{}", "call_id": "c"}]
    ),
    "message content is not a list of parts": final(output=[{**MESSAGE, "content": [1, 2]}]),
}


def assert_failed_not_continuable(client: OpenAI, response_id: str) -> None:
    stored = client.responses.retrieve(response_id)
    assert stored.status == "failed"
    # OpenAI's schema allows only its own codes here; the stream's error event and the
    # HTTP error carry ``upstream_invalid_response``.
    assert stored.error is not None and stored.error.code == "server_error"
    assert "model server" in stored.error.message
    assert stored.output == []
    with pytest.raises(BadRequestError) as error:
        client.responses.create(model=MODEL, input="x", previous_response_id=response_id)
    assert error.value.code == "previous_response_not_continuable"


@pytest.mark.parametrize("case", list(STREAMED))
def test_malformed_stream_is_a_stored_failure(client: OpenAI, sim: SimServer, case: str) -> None:
    sim.push(Malformed(events=STREAMED[case]))
    events = list(client.responses.create(model=MODEL, input="x", stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"], events
    assert narrow(events[-2], ResponseErrorEvent).code == "upstream_invalid_response"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert_failed_not_continuable(client, narrow(events[-1], ResponseFailedEvent).response.id)


@pytest.mark.parametrize("case", list(ANSWERED))
def test_malformed_json_answer_is_a_stored_failure(
    client: OpenAI, sim: SimServer, case: str
) -> None:
    sim.push(Malformed(body=ANSWERED[case]))
    with pytest.raises(APIStatusError) as error:
        client.responses.create(model=MODEL, input="x")
    assert error.value.status_code == 502
    assert error.value.code == "upstream_invalid_response"
    response_id = error.value.message.split("'")[1]
    assert_failed_not_continuable(client, response_id)


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    server = start_mcp_server()
    yield server
    server.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_malformed_answer_in_a_tool_round_is_a_stored_failure(
    backend: str,
    db_url: str,
    sim: SimServer,
    mcp_server: McpTestServer,
    tmp_path: Path,
    stream: bool,
) -> None:
    """The gateway's tool loop checks every round's answer the same way: round one calls
    an MCP tool, round two's answer is malformed."""
    tenant = create_tenant(db_url)
    tool: Mcp = {
        "type": "mcp",
        "server_label": "tools",
        "server_url": mcp_server.url,
        "require_approval": "never",
    }
    second = (
        Malformed(events=[*OPENING, completed({})])
        if stream
        else Malformed(body={"output": "x", "status": 7})
    )
    sim.push(ToolCalls([Call("tools__add", {"a": 1, "b": 2})]), second)
    with app_server(backend, db_url, sim.url, tmp_path, mcp_allow_loopback=True) as gateway:
        client = gateway.client(tenant, timeout=30)
        if stream:
            events = list(
                client.responses.create(model=MODEL, input="x", tools=[tool], stream=True)
            )
            assert [e.type for e in events[-2:]] == ["error", "response.failed"]
            response_id = narrow(events[-1], ResponseFailedEvent).response.id
        else:
            with pytest.raises(APIStatusError) as error:
                client.responses.create(model=MODEL, input="x", tools=[tool])
            assert error.value.code == "upstream_invalid_response"
            response_id = error.value.message.split("'")[1]
        assert mcp_server.calls_of("add")
        assert_failed_not_continuable(client, response_id)
