"""MCP tools in a multi-agent tree (issue 37): the project's real test MCP server on
loopback, the simulator scripting each agent, the SDK's beta client, both databases.

Every agent may call the request's MCP tools: the servers are listed once (the root's
``mcp_list_tools``), every agent's model sees their tools as functions beside the six
actions, and each call is run by the gateway and shown as an ``mcp_call`` with the agent
that made it, its output given to that agent's model. A tree does not pause for approvals:
a tool that would need one is refused (400) before anything runs or is stored, and so is
an answer to an earlier approval request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from openai import BadRequestError, OpenAI
from openai.types.beta.beta_response_input_param import McpApprovalResponse
from openai.types.responses.tool_param import Mcp

from agentic_api.mcp.client import load_sdk
from agentic_api.turns.kinds.multi_agent.actions import NAMES
from tests.api.test_bad_input import count_responses
from tests.conftest import RunningServer, make_database
from tests.support.databases import drop_pg_database
from tests.support.mcp_server import McpTestServer, mcp_server_fixtures
from tests.support.multi_agent import (
    ALPHA,
    BETAS,
    MODEL,
    MULTI,
    ROOT,
    by_agent,
    events_of,
    tree_app,
)
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

mcp_server, _fresh_mcp_calls = mcp_server_fixtures()


@pytest.fixture(scope="module")
def tree_server(
    backend: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    # Its own database, as the MCP gateway tests' (test_mcp_tools.py): the session
    # server's workers refuse loopback MCP hosts.
    url, pg_name = make_database(backend, tmp_path_factory.mktemp("tree-mcp-db"))
    asyncio.run(load_sdk())
    try:
        with tree_app(
            backend,
            url,
            sim.url,
            tmp_path_factory.mktemp("tree-mcp"),
            mcp_allow_loopback=True,
            multi_agent_max_depth=1,
        ) as running:
            yield running
    finally:
        if pg_name:
            drop_pg_database(pg_name)


@pytest.fixture
def keys(tree_server: RunningServer) -> TenantKeys:
    return create_tenant(tree_server.db_url)


@pytest.fixture
def client(tree_server: RunningServer, keys: TenantKeys) -> OpenAI:
    return tree_server.client(keys, timeout=30)


def mcp_tool(url: str, require_approval: Any = "never", **more: Any) -> Mcp:
    tool: Mcp = {
        "type": "mcp",
        "server_label": "tools",
        "server_url": url,
        "require_approval": require_approval,
    }
    tool.update(more)  # type: ignore[typeddict-item]
    return tool


def create_tree(client: OpenAI, tools: list[Mcp], **kwargs: Any) -> Any:
    return client.beta.responses.create(
        model=MODEL,
        instructions="You lead a small team; use the tools.",
        input="Add 2 and 3, and have a helper echo hello.",
        tools=tools,
        multi_agent=MULTI,
        betas=BETAS,
        **kwargs,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_every_agent_calls_the_requests_mcp_tools(
    client: OpenAI, sim: SimServer, mcp_server: McpTestServer, stream: bool
) -> None:
    sim.push_for(
        ROOT,
        ToolCalls(
            [
                Call("tools__add", {"a": 2, "b": 3}, call_id="c_add"),
                Call("spawn_agent", {"task_name": "alpha", "message": "Echo hello."}),
            ]
        ),
        ToolCalls([Call("wait_agent", {})]),
        Reply("5, and hello."),
    )
    sim.push_for(
        ALPHA,
        ToolCalls([Call("tools__echo", {"text": "hello"}, call_id="c_echo")]),
        Reply("hello"),
    )
    # A filter under which no allowed tool needs approval is accepted.
    tools = [
        mcp_tool(
            mcp_server.url,
            require_approval={"never": {"tool_names": ["add", "echo"]}},
            allowed_tools=["add", "echo"],
        )
    ]
    if stream:
        events = [e.model_dump(exclude_none=True) for e in create_tree(client, tools, stream=True)]
        terminal = events[-1]
        assert terminal["type"] == "response.completed"
        final = terminal["response"]
        kinds = [e["type"] for e in events]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert "response.mcp_list_tools.completed" in kinds
        # An mcp_call is done once it has run, after items announced later: by index.
        done = [e for e in events if e["type"] == "response.output_item.done"]
        assert {e["output_index"]: e["item"] for e in done} == dict(enumerate(final["output"]))
    else:
        response = create_tree(client, tools)
        final = response.model_dump(exclude_none=True)
    assert final["status"] == "completed"
    output = final["output"]
    assert all("agent" in item for item in output)

    listing = output[0]
    assert listing["type"] == "mcp_list_tools" and listing["agent"] == {"agent_name": ROOT}
    assert sorted(t["name"] for t in listing["tools"]) == ["add", "echo"]
    calls = {item["name"]: item for item in output if item["type"] == "mcp_call"}
    assert set(calls) == {"add", "echo"}
    assert calls["add"]["agent"] == {"agent_name": ROOT}
    assert calls["add"]["output"] == "5.0" and calls["add"]["status"] == "completed"
    assert orjson.loads(calls["add"]["arguments"]) == {"a": 2, "b": 3}
    assert calls["echo"]["agent"] == {"agent_name": ALPHA}
    assert calls["echo"]["output"] == "hello" and calls["echo"]["status"] == "completed"
    assert [c.arguments for c in mcp_server.calls_of("add")] == [{"a": 2, "b": 3}]
    assert [c.arguments for c in mcp_server.calls_of("echo")] == [{"text": "hello"}]
    assert output[-1]["type"] == "message" and output[-1]["phase"] == "final_answer"
    # Nothing of the gateway's function-call pairs is shown.
    assert "function_call" not in [item["type"] for item in output]

    requests = by_agent(sim)
    assert {name: len(recs) for name, recs in requests.items()} == {ROOT: 3, ALPHA: 2}
    for recs in requests.values():
        for rec in recs:
            sent = rec.json["tools"]
            assert all(tool["type"] == "function" for tool in sent)
            names = [tool["name"] for tool in sent]
            assert names[:2] == ["tools__add", "tools__echo"]
            assert set(names[2:]) == NAMES
    # Each agent's model got its call's result, after its calls, in their order.
    root_second = requests[ROOT][1].json["input"]
    outputs = [item for item in root_second if item["type"] == "function_call_output"]
    assert [item["call_id"] for item in outputs[:1]] == ["c_add"]
    assert outputs[0]["output"] == "5.0"
    alpha_second = requests[ALPHA][1].json["input"]
    assert alpha_second[-1]["type"] == "function_call_output"
    assert alpha_second[-1]["call_id"] == "c_echo" and alpha_second[-1]["output"] == "hello"
    # The subagent still starts with its parent's prompt as the spawning round sent it.
    parent_input = requests[ROOT][0].json["input"]
    assert requests[ALPHA][0].json["input"][: len(parent_input)] == parent_input

    stored = client.beta.responses.retrieve(final["id"], betas=BETAS)
    assert stored.model_dump(exclude_none=True)["output"] == output


def test_a_streamed_mcp_call_has_the_tool_loops_events(
    client: OpenAI, sim: SimServer, mcp_server: McpTestServer
) -> None:
    """Each agent's call is announced (in_progress, with its arguments) before the gateway
    runs it and settled after (completed or failed), at one output index, with its agent's
    name, as the single-agent tool loop streams it."""
    sim.push_for(
        ROOT,
        ToolCalls(
            [
                Call("spawn_agent", {"task_name": "alpha", "message": "Try the failing tool."}),
                Call("tools__add", {"a": 2, "b": 3}, call_id="c_add"),
            ]
        ),
        ToolCalls([Call("wait_agent", {})]),
        Reply("5; alpha's tool failed."),
    )
    sim.push_for(
        ALPHA,
        ToolCalls([Call("tools__fail", {"reason": "nope"}, call_id="c_fail")]),
        Reply("It failed."),
    )
    tools = [mcp_tool(mcp_server.url, allowed_tools=["add", "fail"])]
    events = [e.model_dump(exclude_none=True) for e in create_tree(client, tools, stream=True)]
    assert events[-1]["type"] == "response.completed"
    output = events[-1]["response"]["output"]
    calls = {item["name"]: item for item in output if item["type"] == "mcp_call"}
    assert set(calls) == {"add", "fail"}
    for name, agent, outcome in (("add", ROOT, "completed"), ("fail", ALPHA, "failed")):
        call = calls[name]
        assert call["agent"] == {"agent_name": agent} and call["status"] == outcome
        index = output.index(call)
        seen = events_of(events, call["id"])
        assert [e["type"] for e in seen] == [
            "response.output_item.added",
            "response.mcp_call.in_progress",
            "response.mcp_call_arguments.done",
            f"response.mcp_call.{outcome}",
            "response.output_item.done",
        ]
        assert all(e["output_index"] == index for e in seen)
        announced = seen[0]["item"]
        assert announced["status"] == "in_progress" and announced["agent"] == call["agent"]
        assert announced["arguments"] == seen[2]["arguments"] == call["arguments"]
        assert "output" not in announced and "error" not in announced
        assert seen[-1]["item"] == call
    assert calls["add"]["output"] == "5.0"
    assert "nope" in calls["fail"]["error"]["content"][0]["text"]
    # Announced where its round made it: before the spawn's result and the subagent's
    # items, though it was settled after some of them.
    spawned = next(i for i in output if i["type"] == "multi_agent_call_output")
    assert output.index(calls["add"]) < output.index(spawned)


def test_a_tool_that_needs_approval_is_refused_before_anything_runs(
    client: OpenAI,
    sim: SimServer,
    mcp_server: McpTestServer,
    tree_server: RunningServer,
    keys: TenantKeys,
) -> None:
    before = count_responses(tree_server.db_url, keys.id)
    # "never" for add only: the server's other tools would need approval.
    tools = [mcp_tool(mcp_server.url, require_approval={"never": {"tool_names": ["add"]}})]
    with pytest.raises(BadRequestError) as caught:
        create_tree(client, tools)
    error: Any = caught.value.body
    assert error["param"] == "tools[0].require_approval"
    assert error["code"] == "unsupported_parameter"
    assert "needs approval" in error["message"]
    assert sim.requests("/v1/responses") == []
    assert mcp_server.calls == []
    assert count_responses(tree_server.db_url, keys.id) == before


@pytest.mark.parametrize("background", [False, True])
def test_an_approval_answer_is_refused_in_a_tree(
    client: OpenAI, sim: SimServer, mcp_server: McpTestServer, background: bool
) -> None:
    sim.push(ToolCalls([Call("tools__add", {"a": 4, "b": 4}, call_id="a1")]))
    asked = client.responses.create(
        model=MODEL, input="add", tools=[mcp_tool(mcp_server.url, require_approval="always")]
    )
    request = asked.output[1]
    assert request.type == "mcp_approval_request"
    sim.state.clear_recordings()
    answer: McpApprovalResponse = {
        "type": "mcp_approval_response",
        "approval_request_id": request.id,
        "approve": True,
    }
    with pytest.raises(BadRequestError) as caught:
        client.beta.responses.create(
            model=MODEL,
            input=[answer],
            previous_response_id=asked.id,
            tools=[mcp_tool(mcp_server.url)],
            multi_agent=MULTI,
            betas=BETAS,
            # Refused as the turn is prepared: a background request is never queued.
            background=background,
        )
    error: Any = caught.value.body
    assert error["param"] == "input[0].approval_request_id"
    assert "multi_agent" in error["message"]
    assert sim.requests("/v1/responses") == []
    assert mcp_server.calls_of("add") == []


def test_an_interrupted_agents_mcp_call_is_settled_not_left_in_progress(
    client: OpenAI, sim: SimServer, mcp_server: McpTestServer
) -> None:
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Wait a while."})]),
        # Long enough for the helper's tool to be running, far shorter than the tool.
        ToolCalls([Call("wait_agent", {"targets": ["alpha"], "timeout_ms": 1000})]),
        ToolCalls([Call("interrupt_agent", {"target": "alpha"})]),
        Reply("Stopped the helper."),
    )
    sim.push_for(ALPHA, ToolCalls([Call("tools__slow", {"seconds": 5}, call_id="c_slow")]))
    tools = [
        mcp_tool(
            mcp_server.url,
            require_approval={"never": {"tool_names": ["slow"]}},
            allowed_tools=["slow"],
        )
    ]
    response = create_tree(client, tools)
    final = response.model_dump(exclude_none=True)
    assert final["status"] == "completed", [(i["type"], i.get("agent")) for i in final["output"]]
    calls = [item for item in final["output"] if item["type"] == "mcp_call"]
    assert len(calls) == 1, final["output"]
    (call,) = calls
    assert call["agent"] == {"agent_name": ALPHA}
    # Interrupted while the tool ran: settled as not finished, never left in progress.
    assert call["status"] == "incomplete"
    stored = client.beta.responses.retrieve(final["id"], betas=BETAS)
    assert stored.model_dump(exclude_none=True)["output"] == final["output"]
