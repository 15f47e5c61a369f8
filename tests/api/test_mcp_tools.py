"""The gateway's MCP tool loop end to end: a real MCP server on loopback, the simulator
issuing tool calls, our server driven through the official SDK, on SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import structlog
from openai import APIStatusError, BadRequestError, OpenAI
from openai.types.responses.response_input_param import McpApprovalResponse
from openai.types.responses.tool_param import Mcp, McpRequireApproval

from agentic_api.mcp.client import load_sdk
from tests.conftest import RunningServer, app_server, make_database
from tests.support.databases import drop_pg_database
from tests.support.mcp_server import McpTestServer, mcp_server_fixtures
from tests.support.servers import free_port
from tests.support.sql import rows
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.websocket import open_socket, until_terminal
from tests.upstream_sim import Call, Fail, Reply, SimServer, ToolCalls

MAX_ROUNDS = 3
SECRET = "sk-mcp-secret-9f8e7d6c5b4a"


mcp_server, _fresh_mcp_calls = mcp_server_fixtures()


@pytest.fixture(scope="module")
def gateway_db(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway's own database: on the session one, the session server's background
    workers (which refuse loopback MCP hosts) could claim the gateway's jobs and fail them."""
    url, pg_name = make_database(backend, tmp_path_factory.mktemp("mcp-db"))
    yield url
    if pg_name:
        drop_pg_database(pg_name)


@pytest.fixture(scope="module")
def gateway(
    backend: str, gateway_db: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    # A process's first MCP session imports the SDK (a second or more on a loaded
    # machine); these tests time calls and rounds, not that import.
    asyncio.run(load_sdk())
    with app_server(
        backend,
        gateway_db,
        sim.url,
        tmp_path_factory.mktemp("mcp-data"),
        mcp_allow_loopback=True,
        mcp_call_timeout_seconds=1.0,
        mcp_max_output_bytes=2000,
        max_tool_rounds=MAX_ROUNDS,
        log_level="info",
    ) as running:
        yield running


@pytest.fixture
def keys(gateway: RunningServer) -> TenantKeys:
    return create_tenant(gateway.db_url)


@pytest.fixture
def oai(gateway: RunningServer, keys: TenantKeys) -> OpenAI:
    return gateway.client(keys, timeout=30)


def mcp_tool(
    url: str,
    *,
    require_approval: McpRequireApproval = "never",
    headers: dict[str, str] | None = None,
    authorization: str | None = None,
) -> Mcp:
    tool: Mcp = {
        "type": "mcp",
        "server_label": "tools",
        "server_url": url,
        "require_approval": require_approval,
    }
    if headers is not None:
        tool["headers"] = headers
    if authorization is not None:
        tool["authorization"] = authorization
    return tool


def dumped(response: Any) -> dict[str, Any]:
    value = response.model_dump(mode="json")
    assert isinstance(value, dict)
    return value


def create(
    oai: OpenAI, *, stream: bool, **kwargs: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One turn, streamed or not: the final object and (when streamed) the events."""
    if not stream:
        return dumped(oai.responses.create(**kwargs)), []
    events = [dumped(e) for e in oai.responses.create(stream=True, **kwargs)]
    terminal = events[-1]
    assert terminal["type"] in ("response.completed", "response.incomplete")
    return terminal["response"], events


def upstream_requests(sim: SimServer) -> list[Any]:
    return sim.requests("/v1/responses")


def assert_extends(earlier: Any, later: Any) -> None:
    """``later``'s upstream request is ``earlier``'s with items appended: the same bytes
    up to the end of ``earlier``'s input, the same fields, the same salt and session."""
    head = earlier.body[: -len(b"]}")]
    assert later.body.startswith(head)
    assert later.body[len(head) : len(head) + 1] == b","
    before, after = earlier.json, later.json
    assert after["input"][: len(before["input"])] == before["input"]
    assert {k: v for k, v in after.items() if k != "input"} == {
        k: v for k, v in before.items() if k != "input"
    }
    for header in ("x-session-id",):
        assert later.headers.get(header) == earlier.headers.get(header)


def assert_chain(requests: list[Any]) -> None:
    for earlier, later in itertools.pairwise(requests):
        assert_extends(earlier, later)


def output_types(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


def stored_items(db_url: str, response_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    found = rows(
        db_url,
        "SELECT role, type, data FROM response_items WHERE response_id = :id ORDER BY position",
        id=response_id,
    )
    return [(r[0], r[1], orjson.loads(r[2])) for r in found]


# --- the loop -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_single_call(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer, gateway: RunningServer, stream: bool
) -> None:
    sim.push(ToolCalls([Call("tools__add", {"a": 2, "b": 3}, call_id="c1")]), Reply("It is 5."))
    final, events = create(
        oai,
        stream=stream,
        model=sim.config.model,
        input="add 2 and 3",
        tools=[mcp_tool(mcp_server.url)],
    )
    assert final["status"] == "completed"
    assert output_types(final) == ["mcp_list_tools", "mcp_call", "message"]
    listing, call, message = final["output"]
    assert listing["server_label"] == "tools"
    assert "add" in [t["name"] for t in listing["tools"]]
    assert call["name"] == "add" and call["server_label"] == "tools"
    assert orjson.loads(call["arguments"]) == {"a": 2, "b": 3}
    assert call["output"] == "5.0" and call["error"] is None and call["status"] == "completed"
    assert message["content"][0]["text"] == "It is 5."
    assert [c.arguments for c in mcp_server.calls_of("add")] == [{"a": 2, "b": 3}]

    first, second = upstream_requests(sim)
    tools = first.json["tools"]
    assert all(t["type"] == "function" for t in tools)
    assert "tools__add" in [t["name"] for t in tools]
    assert_extends(first, second)
    added = second.json["input"][len(first.json["input"]) :]
    assert [i["type"] for i in added] == ["function_call", "function_call_output"]
    assert added[1] == {**added[1], "call_id": "c1", "output": "5.0"}
    # Usage covers both rounds.
    assert final["usage"]["input_tokens"] == first.prompt_tokens + second.prompt_tokens

    # Stored: the model-visible sequence; shown: the client's, also on retrieval.
    assert [t for _, t, _ in stored_items(gateway.db_url, final["id"])] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert dumped(oai.responses.retrieve(final["id"]))["output"] == final["output"]
    if stream:
        kinds = [e["type"] for e in events]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        for expected in (
            "response.mcp_list_tools.in_progress",
            "response.mcp_list_tools.completed",
            "response.mcp_call.in_progress",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.completed",
        ):
            assert expected in kinds
        assert "response.function_call_arguments.delta" not in kinds
        done = [e for e in events if e["type"] == "response.output_item.done"]
        assert {e["output_index"]: e["item"] for e in done} == dict(enumerate(final["output"]))


@pytest.mark.parametrize("stream", [False, True])
def test_several_rounds_then_a_continuation(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer, stream: bool
) -> None:
    sim.push(
        ToolCalls([Call("tools__add", {"a": 1, "b": 1}, call_id="r1")], reasoning="add first"),
        ToolCalls([Call("tools__echo", {"text": "two"}, call_id="r2")], text="Now echo."),
        Reply("Done: two."),
    )
    tools = [mcp_tool(mcp_server.url), {"type": "function", "name": "mine", "parameters": {}}]
    final, events = create(oai, stream=stream, model=sim.config.model, input="go", tools=tools)
    assert final["status"] == "completed"
    assert output_types(final) == [
        "mcp_list_tools",
        "reasoning",
        "mcp_call",
        "message",
        "mcp_call",
        "message",
    ]
    assert [o.get("output") for o in final["output"] if o["type"] == "mcp_call"] == ["2.0", "two"]
    requests = upstream_requests(sim)
    assert len(requests) == 3
    assert_chain(requests)
    # The client's own function tool travels next to the gateway's, in request order.
    names = [t["name"] for t in requests[0].json["tools"]]
    assert names[-1] == "mine" and "tools__echo" in names
    if stream:
        indices = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
        assert indices == list(range(len(final["output"])))

    # The next turn replays what the model saw: it extends the last round byte for byte.
    sim.push(Reply("Sure."))
    nxt, _ = create(
        oai,
        stream=stream,
        model=sim.config.model,
        input="and now?",
        previous_response_id=final["id"],
        tools=tools,
    )
    assert nxt["status"] == "completed"
    assert_extends(requests[-1], upstream_requests(sim)[-1])
    assert upstream_requests(sim)[-1].cached_tokens > 0


def test_parallel_calls_run_together(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer
) -> None:
    sim.push(
        ToolCalls(
            [
                Call("tools__slow", {"seconds": 0.8}, call_id="p1"),
                Call("tools__slow", {"seconds": 0.8}, call_id="p2"),
                Call("tools__lookup", {"key": "k"}, call_id="p3"),
            ]
        ),
        Reply("All three."),
    )
    started = time.monotonic()
    final = dumped(
        oai.responses.create(model=sim.config.model, input="x", tools=[mcp_tool(mcp_server.url)])
    )
    elapsed = time.monotonic() - started
    assert [o["output"] for o in final["output"] if o["type"] == "mcp_call"] == [
        "slept 0.8",
        "slept 0.8",
        "value-of-k",
    ]
    assert elapsed < 1.5, "the two slow calls should overlap (in sequence: 1.6 s)"
    first, second = upstream_requests(sim)
    assert_extends(first, second)
    added = second.json["input"][len(first.json["input"]) :]
    assert [(i["type"], i["call_id"]) for i in added] == [
        ("function_call", "p1"),
        ("function_call", "p2"),
        ("function_call", "p3"),
        ("function_call_output", "p1"),
        ("function_call_output", "p2"),
        ("function_call_output", "p3"),
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_failing_tool_and_timeout_are_told_to_the_model(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer, stream: bool
) -> None:
    sim.push(
        ToolCalls(
            [
                Call("tools__fail", {"reason": "nope"}, call_id="f1"),
                Call("tools__slow", {"seconds": 5}, call_id="f2"),
                Call("tools__huge", {"size": 10_000}, call_id="f3"),
            ]
        ),
        Reply("Handled."),
    )
    final, events = create(
        oai, stream=stream, model=sim.config.model, input="x", tools=[mcp_tool(mcp_server.url)]
    )
    assert final["status"] == "completed"
    failed, timed_out, huge = (o for o in final["output"] if o["type"] == "mcp_call")
    assert failed["status"] == "failed" and failed["output"] is None
    assert failed["error"]["type"] == "mcp_tool_execution_error"
    assert "nope" in failed["error"]["content"][0]["text"]
    assert timed_out["status"] == "failed"
    assert timed_out["error"] == {
        "type": "mcp_protocol_error",
        "code": -32001,
        "message": "The tool call timed out after 1 seconds.",
    }
    assert huge["status"] == "completed"
    assert huge["output"].endswith("[output truncated: 2000 of 10000 bytes shown]")
    outputs = {
        i["call_id"]: i["output"]
        for i in upstream_requests(sim)[1].json["input"]
        if i["type"] == "function_call_output"
    }
    assert outputs["f1"].startswith("Error: ") and "nope" in outputs["f1"]
    assert outputs["f2"] == "Error: The tool call timed out after 1 seconds."
    assert outputs["f3"] == huge["output"]
    if stream:
        kinds = [e["type"] for e in events]
        assert kinds.count("response.mcp_call.failed") == 2
        assert kinds.count("response.mcp_call.completed") == 1


# --- approvals ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_approval_approved_runs_the_call(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer, gateway: RunningServer, stream: bool
) -> None:
    tools = [mcp_tool(mcp_server.url, require_approval="always")]
    sim.push(ToolCalls([Call("tools__add", {"a": 4, "b": 4}, call_id="a1")]))
    asked, _ = create(oai, stream=stream, model=sim.config.model, input="add", tools=tools)
    assert asked["status"] == "completed"
    assert output_types(asked) == ["mcp_list_tools", "mcp_approval_request"]
    request = asked["output"][1]
    assert request["name"] == "add" and orjson.loads(request["arguments"]) == {"a": 4, "b": 4}
    assert mcp_server.calls_of("add") == []

    sim.push(Reply("It is 8."))
    answer: McpApprovalResponse = {
        "type": "mcp_approval_response",
        "approval_request_id": request["id"],
        "approve": True,
    }
    done, _ = create(
        oai,
        stream=stream,
        model=sim.config.model,
        input=[answer],
        previous_response_id=asked["id"],
        tools=tools,
    )
    assert output_types(done) == ["mcp_list_tools", "mcp_call", "message"]
    call = done["output"][1]
    assert call["output"] == "8.0" and call["approval_request_id"] == request["id"]
    assert len(mcp_server.calls_of("add")) == 1
    first, second = upstream_requests(sim)
    assert_extends(first, second)
    added = second.json["input"][len(first.json["input"]) :]
    # The approval answer is not for the model: it sees the call and its output.
    assert [i["type"] for i in added] == ["function_call", "function_call_output"]
    types = [t for _, t, _ in stored_items(gateway.db_url, done["id"])]
    assert types == ["mcp_approval_response", "function_call_output", "message"]

    # An approval is answered once in a history (a fork from the asking turn may answer
    # it again: that is another history).
    with pytest.raises(BadRequestError) as again:
        oai.responses.create(
            model=sim.config.model, input=[answer], previous_response_id=done["id"], tools=tools
        )
    assert again.value.body["code"] == "approval_request_answered"  # type: ignore[index]


def test_approval_denied_tells_the_model(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer
) -> None:
    tools = [mcp_tool(mcp_server.url, require_approval={"never": {"read_only": True}})]
    sim.push(
        ToolCalls(
            [
                Call("tools__lookup", {"key": "a"}, call_id="d1"),
                Call("tools__add", {"a": 1, "b": 2}, call_id="d2"),
            ]
        )
    )
    asked = dumped(oai.responses.create(model=sim.config.model, input="x", tools=tools))
    # The read-only tool ran at once; the other waits for approval.
    assert output_types(asked) == ["mcp_list_tools", "mcp_call", "mcp_approval_request"]
    assert asked["output"][1]["output"] == "value-of-a"
    sim.push(Reply("OK, I will not add."))
    answer: McpApprovalResponse = {
        "type": "mcp_approval_response",
        "approval_request_id": asked["output"][2]["id"],
        "approve": False,
        "reason": "not now",
    }
    done = dumped(
        oai.responses.create(
            model=sim.config.model, input=[answer], previous_response_id=asked["id"], tools=tools
        )
    )
    assert output_types(done) == ["mcp_list_tools", "message"]
    assert mcp_server.calls_of("add") == []
    last = upstream_requests(sim)[-1].json["input"][-1]
    assert last["type"] == "function_call_output" and last["call_id"] == "d2"
    assert "denied" in last["output"] and "not now" in last["output"]


def test_approval_for_an_unknown_request_is_refused(oai: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("hi"))
    first = oai.responses.create(model=sim.config.model, input="x")
    with pytest.raises(BadRequestError) as refused:
        oai.responses.create(
            model=sim.config.model,
            previous_response_id=first.id,
            input=[
                {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
            ],
        )
    assert refused.value.body["code"] == "approval_request_not_found"  # type: ignore[index]


# --- mixed rounds and limits --------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_mixed_round_ends_with_the_clients_call(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer, stream: bool
) -> None:
    tools = [
        mcp_tool(mcp_server.url),
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
    ]
    sim.push(
        ToolCalls(
            [
                Call("tools__add", {"a": 1, "b": 2}, call_id="m1"),
                Call("get_weather", {"city": "Oslo"}, call_id="m2"),
            ]
        )
    )
    first, _ = create(oai, stream=stream, model=sim.config.model, input="x", tools=tools)
    assert first["status"] == "completed"
    assert output_types(first) == ["mcp_list_tools", "mcp_call", "function_call"]
    assert first["output"][1]["output"] == "3.0"
    assert first["output"][2]["call_id"] == "m2"
    assert len(upstream_requests(sim)) == 1

    sim.push(Reply("Sunny, and 3."))
    second, _ = create(
        oai,
        stream=stream,
        model=sim.config.model,
        previous_response_id=first["id"],
        tools=tools,
        input=[{"type": "function_call_output", "call_id": "m2", "output": "sunny"}],
    )
    assert second["status"] == "completed"
    before, after = upstream_requests(sim)
    assert_extends(before, after)
    added = after.json["input"][len(before.json["input"]) :]
    assert [(i["type"], i["call_id"]) for i in added] == [
        ("function_call", "m1"),
        ("function_call", "m2"),
        ("function_call_output", "m1"),
        ("function_call_output", "m2"),
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_round_limit_ends_the_turn(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer, stream: bool
) -> None:
    sim.push(
        *(
            ToolCalls([Call("tools__add", {"a": n, "b": n}, call_id=f"l{n}")])
            for n in range(MAX_ROUNDS)
        )
    )
    final, _ = create(
        oai, stream=stream, model=sim.config.model, input="x", tools=[mcp_tool(mcp_server.url)]
    )
    # OpenAI's schema has no incomplete reason for a tool limit: the turn completes, and
    # the call it did not run shows as incomplete.
    assert final["status"] == "completed" and final["incomplete_details"] is None
    requests = upstream_requests(sim)
    assert len(requests) == MAX_ROUNDS
    assert_chain(requests)
    calls = [o for o in final["output"] if o["type"] == "mcp_call"]
    assert [c["status"] for c in calls] == ["completed", "completed", "incomplete"]
    assert len(mcp_server.calls_of("add")) == MAX_ROUNDS - 1
    # It is continuable, and the history stays call/output pairs.
    sim.push(Reply("ok"))
    nxt, _ = create(
        oai,
        stream=stream,
        model=sim.config.model,
        input="go on",
        previous_response_id=final["id"],
        tools=[mcp_tool(mcp_server.url)],
    )
    assert nxt["status"] == "completed"
    assert_extends(requests[-1], upstream_requests(sim)[-1])


def test_max_tool_calls_leaves_later_calls_unrun(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer
) -> None:
    sim.push(
        ToolCalls([Call("tools__add", {"a": 1, "b": 1}, call_id="x1")]),
        ToolCalls(
            [
                Call("tools__add", {"a": 2, "b": 2}, call_id="x2"),
                Call("tools__add", {"a": 3, "b": 3}, call_id="x3"),
            ]
        ),
    )
    final = dumped(
        oai.responses.create(
            model=sim.config.model, input="x", tools=[mcp_tool(mcp_server.url)], max_tool_calls=2
        )
    )
    assert final["status"] == "completed" and final["incomplete_details"] is None
    assert [o["status"] for o in final["output"] if o["type"] == "mcp_call"] == [
        "completed",
        "completed",
        "incomplete",
    ]
    assert len(mcp_server.calls_of("add")) == 2
    assert len(upstream_requests(sim)) == 2


def test_failure_mid_loop_commits_nothing_continuable(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer, gateway: RunningServer
) -> None:
    conversation = oai.conversations.create()
    sim.push(Reply("first"))
    oai.responses.create(model=sim.config.model, input="hello", conversation=conversation.id)
    items_before = [i.id for i in oai.conversations.items.list(conversation.id)]
    sim.push(ToolCalls([Call("tools__add", {"a": 1, "b": 1}, call_id="z1")]), Fail(500))
    with pytest.raises(APIStatusError):
        oai.responses.create(
            model=sim.config.model,
            input="x",
            conversation=conversation.id,
            tools=[mcp_tool(mcp_server.url)],
        )
    # The tool ran, the turn failed: the conversation did not move.
    assert len(mcp_server.calls_of("add")) == 1
    assert [i.id for i in oai.conversations.items.list(conversation.id)] == items_before
    sim.push(Reply("still here"))
    again = oai.responses.create(model=sim.config.model, input="y", conversation=conversation.id)
    assert again.status == "completed"


# --- safety -------------------------------------------------------------------------------


def test_hosts_outside_the_allow_list_are_refused(
    oai: OpenAI, sim: SimServer, server: RunningServer, tenant: Any
) -> None:
    with pytest.raises(BadRequestError) as refused:
        oai.responses.create(
            model=sim.config.model,
            input="x",
            tools=[mcp_tool("https://mcp.example.com/mcp")],
        )
    assert refused.value.body["code"] == "mcp_server_not_allowed"  # type: ignore[index]
    assert refused.value.body["param"] == "tools[0].server_url"  # type: ignore[index]
    # The default server does not call loopback hosts at all.
    plain = server.client(tenant, timeout=20)
    with pytest.raises(BadRequestError) as loopback:
        plain.responses.create(
            model=sim.config.model,
            input="x",
            tools=[mcp_tool("http://127.0.0.1:9/mcp")],
            stream=True,
        )
    assert loopback.value.body["code"] == "mcp_server_not_allowed"  # type: ignore[index]
    assert upstream_requests(sim) == []


def test_unreachable_server_fails_the_request_with_424(oai: OpenAI, sim: SimServer) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    for stream in (False, True):
        with pytest.raises(APIStatusError) as failed:
            oai.responses.create(
                model=sim.config.model, input="x", tools=[mcp_tool(url)], stream=stream
            )
        assert failed.value.status_code == 424
        assert failed.value.body["code"] == "mcp_list_tools_failed"  # type: ignore[index]
    assert upstream_requests(sim) == []


def test_secrets_reach_the_server_and_nothing_else(
    oai: OpenAI,
    sim: SimServer,
    mcp_server: McpTestServer,
    gateway: RunningServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tool = mcp_tool(mcp_server.url, headers={"X-Api-Key": SECRET}, authorization=SECRET)
    sim.push(ToolCalls([Call("tools__whoami", {}, call_id="s1")]), Reply("You are known."))
    # Every log line, ours and the MCP SDK's, at debug (the most talkative level).
    for name in (None, "mcp", "httpx2"):
        caplog.set_level(logging.DEBUG, logger=name)
    level = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with structlog.testing.capture_logs() as ours:
            final, events = create(
                oai, stream=True, model=sim.config.model, input="who am I?", tools=[tool]
            )
    finally:
        structlog.configure(wrapper_class=level)
    assert final["output"][1]["output"] == f"key of length {len(SECRET)}"
    (call,) = mcp_server.calls_of("whoami")
    assert call.headers["x-api-key"] == SECRET
    assert call.headers["authorization"] == f"Bearer {SECRET}"

    echoed = dumped(oai.responses.retrieve(final["id"]))["tools"][0]
    assert echoed["headers"] == {"X-Api-Key": "[redacted]"}
    assert echoed["authorization"] == "[redacted]"
    assert SECRET not in orjson.dumps(events).decode()
    for request in upstream_requests(sim):
        assert SECRET.encode() not in request.body
    for table in ("responses", "response_items", "response_events"):
        for row in rows(gateway.db_url, f"SELECT * FROM {table}"):
            assert SECRET not in repr(tuple(row)), table
    assert any(entry["event"] == "mcp call" for entry in ours)
    assert SECRET not in repr(ours)
    assert caplog.records and SECRET not in caplog.text

    # A background response runs from its stored request, which holds no secret.
    with pytest.raises(BadRequestError) as refused:
        oai.responses.create(model=sim.config.model, input="x", tools=[tool], background=True)
    assert refused.value.body["code"] == "mcp_secrets_in_background"  # type: ignore[index]


def test_bad_mcp_tools_are_refused(oai: OpenAI, sim: SimServer) -> None:
    with pytest.raises(BadRequestError) as refused:
        oai.responses.create(
            model=sim.config.model,
            input="x",
            tools=[{"type": "mcp", "server_label": "a b", "server_url": "http://127.0.0.1/"}],
        )
    assert refused.value.body["param"] == "tools[0].server_label"  # type: ignore[index]


# --- other ways a turn runs ----------------------------------------------------------------


def test_background_response_runs_the_loop(
    oai: OpenAI, sim: SimServer, mcp_server: McpTestServer
) -> None:
    sim.push(ToolCalls([Call("tools__echo", {"text": "bg"}, call_id="b1")]), Reply("Echoed."))
    queued = oai.responses.create(
        model=sim.config.model, input="x", tools=[mcp_tool(mcp_server.url)], background=True
    )
    deadline = time.monotonic() + 15
    final = dumped(oai.responses.retrieve(queued.id))
    while final["status"] in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        final = dumped(oai.responses.retrieve(queued.id))
    assert final["status"] == "completed"
    assert output_types(final) == ["mcp_list_tools", "mcp_call", "message"]
    assert final["output"][1]["output"] == "bg"
    assert_chain(upstream_requests(sim))
    # A host the allow-list refuses fails the request itself, not later in a worker.
    with pytest.raises(BadRequestError) as refused:
        oai.responses.create(
            model=sim.config.model,
            input="x",
            tools=[mcp_tool("https://elsewhere.example/mcp")],
            background=True,
        )
    assert refused.value.body["code"] == "mcp_server_not_allowed"  # type: ignore[index]


def test_websocket_store_false_chain_replays_what_the_model_saw(
    gateway: RunningServer, keys: TenantKeys, sim: SimServer, mcp_server: McpTestServer
) -> None:
    sim.push(ToolCalls([Call("tools__add", {"a": 5, "b": 5}, call_id="w1")]), Reply("Ten."))
    create_event = {
        "type": "response.create",
        "model": sim.config.model,
        "input": "add",
        "store": False,
        "tools": [mcp_tool(mcp_server.url)],
    }
    with open_socket(gateway, keys) as socket:
        socket.send(json.dumps(create_event))
        events = until_terminal(socket)
        first = events[-1]["response"]
        assert events[-1]["type"] == "response.completed"
        assert output_types(first) == ["mcp_list_tools", "mcp_call", "message"]
        assert "response.mcp_call.completed" in [e["type"] for e in events]
        sim.push(Reply("Still ten."))
        socket.send(
            json.dumps({**create_event, "input": "again?", "previous_response_id": first["id"]})
        )
        assert until_terminal(socket)[-1]["type"] == "response.completed"
    requests = upstream_requests(sim)
    assert len(requests) == 3
    assert_chain(requests)
