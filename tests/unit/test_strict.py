"""The strict checks themselves: what our constructors build passes, and any drift from
it (a key removed, a null where an array or number belongs, a broken stream) fails. Also
that the wiring really sits between every client and our servers."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, WebSocket
from openai import APIConnectionError, OpenAI
from starlette.responses import JSONResponse, Response
from websockets.sync.client import connect

from agentic_api.wire.events import snapshot_event, stamped, terminal_event
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.response_object import (
    base_response,
    finish_response,
    output_item,
    usage_block,
)
from tests.support import strict
from tests.support.servers import ThreadedServer

FUNCTION_TOOL = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}


def request() -> CreateResponseRequest:
    return CreateResponseRequest(model="m", input="hi", tools=[FUNCTION_TOOL])


def message() -> dict[str, Any]:
    return output_item(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}],
        }
    )


def completed() -> dict[str, Any]:
    base = base_response(request(), response_id="resp_1", created_at=1, conversation_id=None)
    return finish_response(
        base,
        status="completed",
        output=[message()],
        usage=usage_block(input_tokens=40, cached_tokens=32, output_tokens=3),
        completed_at=2,
    )


def stream() -> list[dict[str, Any]]:
    base = base_response(request(), response_id="resp_1", created_at=1, conversation_id=None)
    events = [
        snapshot_event("response.created", base),
        snapshot_event("response.in_progress", base),
        {"type": "response.output_item.added", "output_index": 0, "item": message()},
        terminal_event(completed()),
    ]
    return [stamped(event, n) for n, event in enumerate(events)]


def raises(rule_prefix: str, check: Callable[[], None]) -> None:
    with pytest.raises(strict.StrictViolation) as caught:
        check()
    assert caught.value.rule.startswith(rule_prefix), caught.value
    strict.take_violations()


def test_what_our_constructors_build_passes() -> None:
    strict.check_response(completed(), "final")
    checker = strict.StreamCheck("stream")
    for event in stream():
        checker.feed(event)
    assert strict.take_violations() == []


@pytest.mark.parametrize("key", strict.RESPONSE_KEYS)
def test_a_missing_response_key_fails(key: str) -> None:
    response = completed()
    del response[key]
    with pytest.raises(strict.StrictViolation):
        strict.check_response(response, "final")
    strict.take_violations()


@pytest.mark.parametrize(
    ("mutate", "rule"),
    [
        (lambda r: r["output"][0]["content"][0].update(logprobs=None), "output_text.logprobs"),
        (lambda r: r["output"][0].pop("status"), "sdk.Response"),
        (lambda r: r.update(top_logprobs=None), "response.top_logprobs"),
        (lambda r: r.update(temperature=None), "response.temperature"),
        (lambda r: r["tools"][0].pop("strict"), "tool.function.strict"),
        (lambda r: r["usage"]["input_tokens_details"].pop("cache_write_tokens"), "sdk."),
        (lambda r: r["usage"].update(total_tokens=1), "usage.total"),
        (lambda r: r.update(output=None), "sdk.Response"),
        # A code beyond the SDK's list passes only in an error code's form (strict.py).
        (lambda r: r.update(error={"code": "Worker lost!", "message": "x"}), "response.error.code"),
        (lambda r: r.update(error={"code": "worker_lost", "message": "x"}), "response.error"),
        (lambda r: r.update(completed_at=None), "response.completed_at"),
    ],
)
def test_drift_in_a_response_fails(mutate: Callable[[dict[str, Any]], Any], rule: str) -> None:
    response = completed()
    mutate(response)
    raises(rule, lambda: strict.check_response(response, "final"))


def test_a_snapshot_without_numbers_fails() -> None:
    events = stream()
    events[0]["response"]["top_p"] = None
    raises("response.top_p", lambda: strict.check_event(events[0], "stream"))


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        (lambda events: events.pop(1), "stream.sequence"),
        (lambda events: events.append(stamped(events[2], 4)), "stream.after_terminal"),
        (lambda events: events[2].update(type="response.unheard_of"), "event.type"),
        (lambda events: events[3].update(type="response.incomplete"), "response.status"),
    ],
)
def test_a_broken_stream_fails(edit: Callable[[list[dict[str, Any]]], Any], rule: str) -> None:
    events = stream()
    edit(events)

    def feed() -> None:
        checker = strict.StreamCheck("stream")
        for event in events:
            checker.feed(event)

    raises(rule, feed)


def test_lists_items_and_errors_are_checked() -> None:
    item = {"id": "msg_1", "type": "message", "role": "user", "content": []}
    raises("sdk.", lambda: strict.check_conversation_item(item, "item"))
    page: dict[str, Any] = {
        "object": "list",
        "data": [message()],
        "first_id": "x",
        "last_id": "msg_1",
    }
    raises("list.keys", lambda: strict.check_list(page, "page", strict.check_output_item))
    page["has_more"] = False
    raises("list.cursors", lambda: strict.check_list(page, "page", strict.check_output_item))
    bad_error = {"error": {"message": "m", "type": "t", "code": None}}
    raises("error.keys", lambda: strict.check_error_body(bad_error, "error"))
    frame = {"type": "error", "error": {"type": "t", "code": None, "message": "m", "param": None}}
    raises("socket_error.status", lambda: strict.check_event(frame, "ws", socket=True))


def test_a_tolerated_rule_passes_only_inside_its_block() -> None:
    response = completed()
    response["output"][0]["content"][0]["logprobs"] = None
    with strict.tolerating("output_text.logprobs"):
        strict.check_response(response, "final")
    raises("output_text.logprobs", lambda: strict.check_response(response, "final"))


# -- the wiring: a server that sends a broken object to every kind of client ---------------


@pytest.fixture
def broken_server() -> Iterator[str]:
    """Sends one defect per route, as if it were ours (its origin is watched)."""
    app = FastAPI()
    response = completed()
    response["output"][0]["content"][0]["logprobs"] = None

    @app.post("/v1/responses")
    async def create() -> Response:
        return JSONResponse(response)

    @app.get("/v1/responses/{response_id}")
    async def replay(response_id: str) -> Response:
        events = stream()
        events[1]["sequence_number"] = 5
        body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        return Response(body, media_type="text/event-stream")

    @app.websocket("/v1/responses")
    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.receive_text()
        event = copy.deepcopy(stream()[0])
        event["response"]["top_logprobs"] = None
        await websocket.send_text(json.dumps(event))
        await websocket.close()

    server = ThreadedServer(app).start()
    try:
        yield server.url
    finally:
        server.stop()


def test_nothing_from_a_watched_server_escapes(broken_server: str) -> None:
    sdk = OpenAI(base_url=f"{broken_server}/v1", api_key="k", max_retries=0)
    try:
        # Whether the SDK passes the violation on or wraps it, the ledger keeps it.
        with pytest.raises((APIConnectionError, strict.StrictViolation)):
            sdk.responses.create(model="m", input="hi")
        assert [v.rule for v in strict.take_violations()] == ["output_text.logprobs"]
    finally:
        sdk.close()

    with pytest.raises(strict.StrictViolation):
        httpx.get(f"{broken_server}/v1/responses/resp_1")
    assert [v.rule for v in strict.take_violations()] == ["stream.sequence"]

    url = broken_server.replace("http://", "ws://") + "/v1/responses"
    with connect(url) as socket, pytest.raises(strict.StrictViolation):
        socket.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
        socket.recv(timeout=10)
    assert [v.rule for v in strict.take_violations()] == ["response.top_logprobs"]
