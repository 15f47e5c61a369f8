"""The hosted multi-agent beta runs a tree (issue 37, slice B), through the SDK's beta client
against the simulator, on both databases: the root spawns two subagents, waits, answers.

Checked: every item and event with the SDK's beta types (strict wiring, ``?beta=true``);
every item attributed to its agent; ``agent_message`` items for tasks and results;
``multi_agent_call_output`` carrying each action's result; every agent's upstream request
carrying the root's session coordinates, with the agent as the task in
``agentic_context``; each subagent's first request starting with its parent's rendered
prompt (so it reuses the parent's full cached blocks: measured == expected in the
simulator's prefix cache); the stored response equal to the one returned; JSON, stream
and background alike; limits answered to the model; cancel stopping the tree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError, InternalServerError, OpenAI

from tests.conftest import RunningServer, running_server
from tests.support.console import cells, log_in, number
from tests.support.multi_agent import (
    ALPHA,
    BETA,
    BETAS,
    MODEL,
    MULTI,
    ROOT,
    action_results,
    agent_accounts,
    by_agent,
    check_tree,
    create_tree,
    dumped,
    finished,
    root_delegates,
    script_two_helpers,
    tree_server_fixture,
)
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.upstream_sim import Call, Hang, Reply, SimServer, ToolCalls
from tests.upstream_sim.state import agent_of

tree_server = tree_server_fixture("tree_server", multi_agent_max_depth=1)


@pytest.fixture
def tree_client(tree_server: RunningServer) -> Iterator[OpenAI]:
    tenant: TenantKeys = create_tenant(tree_server.db_url)
    yield tree_server.client(tenant, timeout=30)


def test_a_tree_answers_as_json(
    tree_client: OpenAI, tree_server: RunningServer, sim: SimServer
) -> None:
    script_two_helpers(sim)
    response = create_tree(tree_client)
    assert response.status == "completed"
    check_tree(dumped(response), sim)
    # Every agent's rounds are counted.
    recs = sim.requests("/v1/responses")
    assert response.usage is not None
    assert response.usage.input_tokens == sum(rec.prompt_tokens or 0 for rec in recs)
    stored = tree_client.beta.responses.retrieve(response.id, betas=BETAS)
    assert [i.model_dump() for i in stored.output] == [i.model_dump() for i in response.output]
    check_agent_accounts(tree_server, response.id, sim)


def check_agent_accounts(server: RunningServer, response_id: str, sim: SimServer) -> None:
    """Each agent's token account, stored with the response, as the admin API shows it:
    its rounds as the simulator answered them, and each subagent's first request's reuse
    against its parent's prefix (the first child to arrive: every full block)."""
    agents = agent_accounts(server, response_id)
    requests = by_agent(sim)
    assert set(agents) == set(requests) == {ROOT, ALPHA, BETA}
    for name, recs in requests.items():
        rounds = agents[name]["rounds"]
        assert sorted((r["input_tokens"], r["cached_tokens"]) for r in rounds) == sorted(
            (rec.prompt_tokens, rec.cached_tokens) for rec in recs
        )
    assert agents[ROOT]["first_request"] is None
    assert agents[ALPHA]["parent_agent"] == agents[BETA]["parent_agent"] == ROOT
    first = min((requests[name][0] for name in (ALPHA, BETA)), key=lambda rec: rec.index)
    reuse = agents[agent_of(first.json) or ""]["first_request"]
    block = sim.config.block_size
    assert reuse["expected_cached"] == reuse["shared_prefix_tokens"] // block * block > 0
    assert reuse["measured_cached"] == first.cached_tokens == reuse["expected_cached"]
    assert reuse["hit"] is True
    # The console's response page shows the same tree.
    with log_in(server.url, create_admin_key(server.db_url)) as http:
        page = http.get(f"/console/responses/{response_id}")
    assert page.status_code == 200, page.text
    shown = cells(page.text)
    assert {ROOT, ALPHA, BETA} <= set(shown)
    child = shown[agent_of(first.json) or ""]
    assert child["expected"] == child["measured"] == number(reuse["expected_cached"])
    assert child["hit"] == "yes" and shown[ROOT]["hit"] == "—"
    assert shown[ROOT]["rounds"] == "3"


def test_a_tree_streams(tree_client: OpenAI, sim: SimServer) -> None:
    script_two_helpers(sim)
    events = list(create_tree(tree_client, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    done = [
        e.item.model_dump(exclude_none=True)
        for e in events
        if e.type == "response.output_item.done"
    ]
    final = events[-1].response
    assert done == [i.model_dump(exclude_none=True) for i in final.output]
    check_tree(done, sim)


def test_a_background_tree_completes(tree_client: OpenAI, sim: SimServer) -> None:
    script_two_helpers(sim)
    found = finished(tree_client, create_tree(tree_client, background=True))
    assert found.status == "completed"
    check_tree(dumped(found), sim)


def test_limits_are_answered_to_the_model(tree_client: OpenAI, sim: SimServer) -> None:
    """Past the depth limit (1 here) a spawn is refused in the action's result; a bad
    argument too; the tree goes on."""
    sim.push_for(
        ROOT,
        ToolCalls(
            [
                Call("spawn_agent", {"task_name": "alpha", "message": "Try to delegate."}),
                Call("spawn_agent", {"task_name": "Bad Name", "message": "x"}),
            ]
        ),
        ToolCalls([Call("wait_agent", {"targets": ["alpha"]})]),
        Reply("done"),
    )
    sim.push_for(
        ALPHA,
        ToolCalls([Call("spawn_agent", {"task_name": "deeper", "message": "Go."})]),
        Reply("I could not delegate."),
    )
    response = create_tree(tree_client)
    assert response.status == "completed"
    outputs = [
        (item.agent.agent_name if item.agent else None, item.output[0].text)
        for item in response.output
        if item.type == "multi_agent_call_output"
    ]
    errors = [json.loads(text).get("error", "") for _, text in outputs]
    assert any("task_name 'Bad Name'" in e for e in errors)
    assert any("depth 2" in e and "AGENTIC_MULTI_AGENT_MAX_DEPTH" in e for e in errors)
    depth_refusal = next(
        name for (name, _), e in zip(outputs, errors, strict=True) if "depth 2" in e
    )
    assert depth_refusal == ALPHA


def test_cancel_stops_the_whole_tree(tree_client: OpenAI, sim: SimServer, tmp_path: Path) -> None:
    root_delegates(sim, "Think forever.", None)
    sim.push_for(ALPHA, Hang())
    queued = create_tree(tree_client, background=True)
    assert sim.wait_for(lambda: len(by_agent(sim).get(ALPHA, [])) == 1, timeout=20)
    cancelled = tree_client.beta.responses.cancel(queued.id, betas=BETAS)
    assert cancelled.status == "cancelled"
    # The subagent's request upstream was abandoned with the tree.
    assert sim.wait_aborted(1, timeout=10)
    assert sim.aborted[0].json["vllm_xargs"] == by_agent(sim)[ALPHA][0].json["vllm_xargs"]
    assert tree_client.beta.responses.retrieve(queued.id, betas=BETAS).status == "cancelled"


def test_a_forced_tool_choice_applies_to_the_roots_first_round(
    tree_client: OpenAI, sim: SimServer
) -> None:
    """Forced on every round (and every subagent, which shares the fields) it would never
    let an agent answer; the prefix a subagent shares is the same either way."""
    script_two_helpers(sim)
    response = create_tree(tree_client, tool_choice={"type": "function", "name": "spawn_agent"})
    assert response.status == "completed"
    requests = by_agent(sim)
    assert requests[ROOT][0].json["tool_choice"] == {"type": "function", "name": "spawn_agent"}
    later = [*requests[ROOT][1:], *requests[ALPHA], *requests[BETA]]
    assert {rec.json["tool_choice"] for rec in later} == {"auto"}


def test_a_forced_spawn_applies_until_the_root_started_as_many_as_may_run_at_once(
    tree_client: OpenAI, sim: SimServer
) -> None:
    """A model that makes one call a round, forced to spawn_agent, still starts
    max_concurrent_subagents (2) subagents; the rounds after are free."""
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Find A."})]),
        ToolCalls([Call("spawn_agent", {"task_name": "beta", "message": "Find B."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1 and B is 2."),
    )
    sim.push_for(ALPHA, Reply("A is 1."))
    sim.push_for(BETA, Reply("B is 2."))
    forced = {"type": "function", "name": "spawn_agent"}
    response = create_tree(tree_client, tool_choice=forced)
    assert response.status == "completed"
    requests = by_agent(sim)
    assert [rec.json["tool_choice"] for rec in requests[ROOT]] == [forced, forced, "auto", "auto"]
    assert {rec.json["tool_choice"] for rec in [*requests[ALPHA], *requests[BETA]]} == {"auto"}


def test_the_response_ends_when_the_whole_tree_has(tree_client: OpenAI, sim: SimServer) -> None:
    """A root that answers while a subagent still works: the subagent finishes, and its
    work is shown after the root's answer (not thrown away)."""
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Take your time."})]),
        Reply("I answered first."),
    )
    sim.push_for(ALPHA, Reply("Late but done.", delay=1.0))
    response = create_tree(tree_client)
    assert response.status == "completed"
    shown = [(item.type, item.agent.agent_name if item.agent else None) for item in response.output]
    root_answer = shown.index(("message", ROOT))
    assert shown.index(("message", ALPHA)) > root_answer
    assert ("agent_message", ALPHA) in shown[root_answer:]


def test_a_multi_agent_response_is_not_compacted_on_request(
    tree_client: OpenAI, sim: SimServer
) -> None:
    """Explicit /responses/compact of a stored multi-agent response (even without the
    beta header) is refused, as the beta refuses it; nothing is sent upstream."""
    script_two_helpers(sim)
    response = create_tree(tree_client)
    sent = len(sim.requests("/v1/responses"))
    with pytest.raises(BadRequestError) as refused:
        tree_client.responses.compact(model=MODEL, previous_response_id=response.id)
    body: Any = refused.value.body
    assert body["param"] == "previous_response_id" and "multi-agent" in body["message"]
    assert len(sim.requests("/v1/responses")) == sent


def test_over_http_a_client_call_is_answered_by_continuing(
    tree_client: OpenAI, sim: SimServer
) -> None:
    """The root calls the client's function: over HTTP the response completes with the
    call (attributed), and the client answers it by continuing with previous_response_id;
    the root sees its call and the output, as for any function call."""
    lookup: Any = {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
    }
    sim.push_for(ROOT, ToolCalls([Call("lookup", {"key": "A"}, call_id="call_a")]))
    first = create_tree(tree_client, tools=[lookup])
    assert first.status == "completed"
    call = first.output[-1]
    assert call.type == "function_call" and call.agent is not None
    assert call.agent.agent_name == ROOT and call.call_id == "call_a"
    sim.push_for(ROOT, Reply("A is 42."))
    second = tree_client.beta.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_a", "output": "42"}],
        tools=[lookup],
        multi_agent=MULTI,
        betas=BETAS,
    )
    assert second.status == "completed"
    sent = by_agent(sim)[ROOT][-1].json["input"]
    assert [(item["type"], item.get("call_id")) for item in sent[-2:]] == [
        ("function_call", "call_a"),
        ("function_call_output", "call_a"),
    ]


@pytest.fixture
def tight_client(fresh_db: str, sim: SimServer, tmp_path: Path) -> Iterator[OpenAI]:
    """A server whose trees may take 2 rounds per agent and task, and 2 seconds."""
    with running_server(
        fresh_db,
        sim,
        tmp_path / "data",
        router_agentic_context=True,
        multi_agent_max_rounds=2,
        multi_agent_max_seconds=2.0,
    ) as server:
        yield server.client(create_tenant(fresh_db), timeout=30)


def test_an_agent_past_its_rounds_ends_errored(tight_client: OpenAI, sim: SimServer) -> None:
    root_delegates(sim, "Loop.", "alpha gave up")
    sim.push_for(
        ALPHA,
        ToolCalls([Call("list_agents", {})]),
        ToolCalls([Call("list_agents", {})]),
        Reply("never reached"),
    )
    response = create_tree(tight_client)
    assert response.status == "completed"
    (waited,) = action_results(dumped(response), "wait_agent")
    alpha = waited["agents"][0]
    assert alpha["status"] == "errored"
    assert "AGENTIC_MULTI_AGENT_MAX_ROUNDS" in alpha["error"]
    assert len(by_agent(sim)[ALPHA]) == 2


def test_a_tree_past_its_wall_time_fails(tight_client: OpenAI, sim: SimServer) -> None:
    root_delegates(sim, "Take forever.", None)
    sim.push_for(ALPHA, Hang())
    with pytest.raises(InternalServerError) as failed:
        create_tree(tight_client)
    body: Any = failed.value.body
    assert body["code"] == "multi_agent_time_limit"
    assert "AGENTIC_MULTI_AGENT_MAX_SECONDS" in body["message"]
    # The subagent's upstream request was abandoned with the tree.
    assert sim.wait_aborted(1, timeout=10)


def test_the_root_agent_is_sent_no_earlier_reasoning_under_current_turn(
    tree_client: OpenAI, sim: SimServer
) -> None:
    # reasoning.context applies to the tree's root as to a plain turn: the earlier turn's
    # reasoning is left out of what it is sent, the stored history keeps it.
    sim.push(Reply("An earlier answer.", reasoning="earlier thoughts"))
    earlier = tree_client.responses.create(model=MODEL, input="An earlier question.")
    assert [item.type for item in earlier.output] == ["reasoning", "message"]
    script_two_helpers(sim)
    tree = create_tree(
        tree_client, previous_response_id=earlier.id, reasoning={"context": "current_turn"}
    )
    assert tree.status == "completed"
    assert tree.reasoning.context == "current_turn"
    first_root = by_agent(sim)[ROOT][0]
    assert [item["type"] for item in first_root.json["input"]][:3] == [
        "message",
        "message",
        "message",
    ]
    assert all(item["type"] != "reasoning" for item in first_root.json["input"])
