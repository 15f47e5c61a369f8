"""The hosted multi-agent beta on the beta WebSocket (issue 37, slice C), against the
simulator on both databases: an agent that calls a client function tool waits while the
rest of the tree goes on; the client answers with ``response.inject`` and gets
``response.inject.created`` in the response's stream, or ``response.inject.failed`` with
its input back for a response that has ended or never ran here. Then the Agents SDK's
hosted multi-agent model (``OpenAIHostedMultiAgentModel``) end to end, its function tool
answered by ``response.inject``. An inject is checked like every frame: once the key is
revoked or its tenant disabled, it is refused, the connection ends and nothing reaches
the waiting agent. Every frame is checked with the SDK's beta types."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.extensions.experimental.hosted_multi_agent import OpenAIHostedMultiAgentModel
from openai import AsyncOpenAI, OpenAI

from tests.api.test_websocket_admin import (
    admin_client,
    assert_credentials_refused,
    ok,
    revoke_only_key,
)
from tests.conftest import RunningServer
from tests.support.multi_agent import (
    ALPHA,
    MODEL,
    ROOT,
    action_results,
    by_agent,
    dumped,
    root_delegates,
    tree_server_fixture,
)
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.websocket import open_socket
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

BETA = "responses_multi_agent=v1"
HEADERS = {"OpenAI-Beta": BETA}
MULTI: Any = {"enabled": True}
LOOKUP: Any = {
    "type": "function",
    "name": "lookup",
    "description": "Looks a value up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
}


socket_server = tree_server_fixture("socket_server")


@pytest.fixture
def keys(socket_server: RunningServer) -> TenantKeys:
    return create_tenant(socket_server.db_url)


def test_a_subagent_waits_for_an_injected_tool_output(
    socket_server: RunningServer, keys: TenantKeys, sim: SimServer
) -> None:
    root_delegates(sim, "Look A up.", "A is 42.")
    sim.push_for(
        ALPHA,
        ToolCalls([Call("lookup", {"key": "A"}, call_id="call_lookup_a")]),
        Reply("A is 42."),
    )
    client = socket_server.client(keys, timeout=30)
    events: list[Any] = []
    with client.beta.responses.connect(extra_headers=HEADERS) as connection:
        connection.response.create(
            model=MODEL, input="What is A?", tools=[LOOKUP], multi_agent=MULTI
        )
        response_id = None
        for event in connection:
            events.append(event)
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_item.done" and event.item.type == "function_call":
                assert event.item.agent is not None and event.item.agent.agent_name == ALPHA
                assert response_id is not None
                connection.response.inject(
                    response_id=response_id,
                    input=[
                        {
                            "type": "function_call_output",
                            "call_id": event.item.call_id,
                            "output": "42",
                        }
                    ],
                )
            if event.type in ("response.completed", "response.failed"):
                break
        # Injecting into the response that has ended: refused, the input comes back.
        assert response_id is not None
        connection.response.inject(
            response_id=response_id,
            input=[{"type": "function_call_output", "call_id": "call_lookup_a", "output": "x"}],
        )
        late = connection.recv()
        connection.response.inject(
            response_id="resp_unknown",
            input=[{"type": "function_call_output", "call_id": "call_x", "output": "x"}],
        )
        unknown = connection.recv()
    kinds = [event.type for event in events]
    assert kinds[-1] == "response.completed"
    assert "response.inject.created" in kinds
    assert late.type == "response.inject.failed"
    assert late.error.code == "response_already_completed"
    assert late.input[0].call_id == "call_lookup_a"  # type: ignore[union-attr]
    assert unknown.type == "response.inject.failed"
    assert unknown.error.code == "response_not_found"
    # The subagent's next round saw the injected output after its call.
    alpha = by_agent(sim)[ALPHA]
    assert len(alpha) == 2
    last = alpha[1].json["input"][-1]
    assert last["type"] == "function_call_output" and last["output"] == "42"
    final = events[-1].response
    assert final.output[-1].type == "message"
    (waited,) = action_results(dumped(final), "wait_agent")
    assert waited["agents"][0]["final_answer"] == "A is 42."


def test_an_injection_nobody_waits_for_is_an_error(
    socket_server: RunningServer, keys: TenantKeys, sim: SimServer
) -> None:
    """A call id no agent waits for changes nothing: an error frame, and the response
    goes on to its end."""
    sim.push_for(
        ROOT, ToolCalls([Call("lookup", {"key": "B"}, call_id="call_b")]), Reply("B is 7.")
    )
    client = socket_server.client(keys, timeout=30)
    with client.beta.responses.connect(extra_headers=HEADERS) as connection:
        connection.response.create(
            model=MODEL, input="What is B?", tools=[LOOKUP], multi_agent=MULTI
        )
        errors: list[Any] = []
        final = None
        response_id = None
        for event in connection:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_item.done" and event.item.type == "function_call":
                assert response_id is not None
                wrong: Any = [{"type": "function_call_output", "call_id": "nope", "output": "1"}]
                connection.response.inject(response_id=response_id, input=wrong)
                errors.append(connection.recv())
                right: Any = [{"type": "function_call_output", "call_id": "call_b", "output": "7"}]
                connection.response.inject(response_id=response_id, input=right)
            if event.type == "response.completed":
                final = event.response
                break
    assert errors[0].type == "error"
    assert "nope" in errors[0].error.message
    assert final is not None and final.status == "completed"


def test_the_agents_sdk_hosted_model_end_to_end(
    socket_server: RunningServer, keys: TenantKeys, sim: SimServer
) -> None:
    """The Agents SDK's hosted multi-agent model over the beta WebSocket: the root spawns
    a subagent that calls the SDK's function tool; the SDK runs it and injects its output;
    the subagent answers, the root waits and answers."""
    looked_up: list[str] = []

    @function_tool
    def lookup(key: str) -> str:
        """Looks a value up."""
        looked_up.append(key)
        return "42"

    root_delegates(sim, "Look A up.", "A is 42.")
    sim.push_for(ALPHA, ToolCalls([Call("lookup", {"key": "A"})]), Reply("The value of A is 42."))

    async def run() -> Any:
        client = AsyncOpenAI(base_url=f"{socket_server.url}/v1", api_key=keys.api_key)
        model = OpenAIHostedMultiAgentModel(MODEL, client, config={"max_concurrent_subagents": 2})
        agent = Agent(name="lead", instructions="Lead.", tools=[lookup], model=model)
        try:
            # No trace export: nothing here may call out of the machine.
            return await Runner.run(
                agent, "What is A?", run_config=RunConfig(tracing_disabled=True)
            )
        finally:
            await model.close()
            await client.close()

    result = asyncio.run(run())
    assert result.final_output == "A is 42."
    assert looked_up == ["A"]
    alpha = by_agent(sim)[ALPHA]
    assert alpha[-1].json["input"][-1]["output"] == "42"


def test_multi_agent_needs_the_beta_header_on_the_socket(
    socket_server: RunningServer, keys: TenantKeys, sim: SimServer
) -> None:
    client: OpenAI = socket_server.client(keys, timeout=30)
    with client.responses.connect() as connection:
        connection.send(
            {  # type: ignore[arg-type]
                "type": "response.create",
                "model": MODEL,
                "input": "hi",
                "multi_agent": MULTI,
            }
        )
        error = connection.recv()
    assert error.type == "error"
    assert sim.requests("/v1/responses") == []


# -- credentials, checked on every frame ---------------------------------------------------

# Long enough for a tree's first round, short enough that a tree left waiting for a client
# that can no longer answer ends within the test.
WAIT_SECONDS = 4.0


waiting_server = tree_server_fixture("waiting_server", multi_agent_max_seconds=WAIT_SECONDS)


def revoke(admin: httpx.Client, tenant: TenantKeys) -> None:
    revoke_only_key(admin, tenant)


def disable(admin: httpx.Client, tenant: TenantKeys) -> None:
    ok(admin.post(f"/tenants/{tenant.id}/disable"))


@pytest.mark.parametrize("admin_acts", [revoke, disable], ids=["key_revoked", "tenant_disabled"])
def test_an_inject_after_the_admin_acted_is_refused_and_injects_nothing(
    waiting_server: RunningServer, sim: SimServer, admin_acts: Any
) -> None:
    """The root waits for the client's lookup; meanwhile the admin revokes the key (or
    disables the tenant). The client's ``response.inject`` is then refused as a
    ``response.create`` would be (a 401 ``error`` frame, close code 1008): the output never
    reaches the root, whose tree runs out of time without another round."""
    tenant = create_tenant(waiting_server.db_url)
    sim.push_for(ROOT, ToolCalls([Call("lookup", {"key": "A"}, call_id="call_a")]), Reply("42."))
    with (
        admin_client(waiting_server) as admin,
        open_socket(waiting_server, tenant, HEADERS) as socket,
    ):
        create = {"model": MODEL, "input": "What is A?", "tools": [LOOKUP], "multi_agent": MULTI}
        socket.send(json.dumps({"type": "response.create", **create}))
        response_id = None
        while True:
            event = json.loads(socket.recv(timeout=20))
            assert event["type"] not in ("response.completed", "response.failed"), event
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            if event["type"] == "response.output_item.done" and event["item"]["type"] == (
                "function_call"
            ):
                break
        assert response_id is not None
        admin_acts(admin, tenant)
        answer = {"type": "function_call_output", "call_id": "call_a", "output": "42"}
        socket.send(
            json.dumps({"type": "response.inject", "response_id": response_id, "input": [answer]})
        )
        # No response.inject.created first: the refusal is the next frame.
        assert_credentials_refused(socket, json.loads(socket.recv(timeout=10)))
    # Nothing was injected: the root never had another round, and its tree ended on its
    # time limit (stored failed, as the client's leaving lets it finish).
    deadline = time.monotonic() + WAIT_SECONDS + 10
    status = None
    while status not in ("failed", "completed") and time.monotonic() < deadline:
        time.sleep(0.2)
        status = scalar(
            waiting_server.db_url, "SELECT status FROM responses WHERE id = :id", id=response_id
        )
    assert status == "failed"
    error = scalar(
        waiting_server.db_url, "SELECT error FROM responses WHERE id = :id", id=response_id
    )
    assert "multi_agent_time_limit" in str(error)
    assert len(by_agent(sim)[ROOT]) == 1
    assert all("call_a" not in json.dumps(rec.json["input"][-1]) for rec in by_agent(sim)[ROOT])
