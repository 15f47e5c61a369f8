"""Every subagent of a multi-agent tree is stored as a response of its own (issue 37): a
branch of the root's session, written in the root's commit, on both databases.

Checked through the SDKs against the simulator: the spawn's result names the subagent's
response; that response is retrieved (tenant-scoped), its input items are what it saw after
the last stored checkpoint (the root's input, then its task), and continuing it with
``previous_response_id`` sends the model exactly what the subagent saw, then the new
input; a tree that continues a stored response chains its subagents to that response; the
admin agents view names every agent's response.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openai import BadRequestError, NotFoundError

from agentic_api.turns.kinds.multi_agent.actions import NAMES
from tests.api.test_multi_agent_tree import (
    ALPHA,
    BETA,
    BETAS,
    INSTRUCTIONS,
    MODEL,
    MULTI,
    QUESTION,
    ROOT,
    by_agent,
    create_tree,
    script_two_helpers,
)
from tests.conftest import RunningServer, app_server
from tests.support.admin_api import AdminApi
from tests.support.console import cells, log_in
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.upstream_sim import Call, Fail, Reply, SimServer, ToolCalls


@pytest.fixture(scope="module")
def branch_server(
    backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    # The simulator tells the agents apart by the agentic_context the router setting sends.
    with app_server(
        backend, db_url, sim.url, tmp_path_factory.mktemp("branches"), router_agentic_context=True
    ) as running:
        yield running


@pytest.fixture
def tenant(branch_server: RunningServer) -> TenantKeys:
    return create_tenant(branch_server.db_url)


def spawned_ids(response: Any) -> dict[str, str]:
    """The subagents' response ids, as the spawns' results tell them."""
    output = [item.model_dump(exclude_none=True) for item in response.output]
    spawns = {
        i["call_id"]
        for i in output
        if i["type"] == "multi_agent_call" and i["action"] == "spawn_agent"
    }
    results = [
        json.loads(i["output"][0]["text"])
        for i in output
        if i["type"] == "multi_agent_call_output" and i["call_id"] in spawns
    ]
    return {result["agent_name"]: result["response_id"] for result in results}


def text_of(item: Any) -> str:
    return "".join(part["text"] for part in item["content"])


def test_each_subagent_is_a_stored_response_that_continues(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client = branch_server.client(tenant, timeout=30)
    script_two_helpers(sim)
    root = create_tree(client)
    assert root.status == "completed"
    ids = spawned_ids(root)
    assert set(ids) == {ALPHA, BETA} and len(set(ids.values())) == 2

    alpha = client.responses.retrieve(ids[ALPHA])
    assert alpha.status == "completed"
    assert alpha.previous_response_id is None  # the tree started afresh
    assert [item.type for item in alpha.output] == ["message"]
    assert alpha.output_text == "A is 1."
    assert alpha.usage is not None and alpha.usage.input_tokens > 0
    # What it saw after the last checkpoint: the root's input, then its task.
    seen = [i.model_dump() for i in client.responses.input_items.list(ids[ALPHA], order="asc")]
    assert text_of(seen[0]) == QUESTION
    assert text_of(seen[-1]).startswith(f"You are the subagent {ALPHA}, started by {ROOT}.")
    assert len(seen) == 2

    # Its stream is replayed from what was stored.
    replayed = list(client.responses.retrieve(ids[ALPHA], stream=True))
    assert replayed[-1].type == "response.completed"
    assert replayed[-1].response.output_text == "A is 1."

    # Another tenant does not see it.
    stranger = branch_server.client(create_tenant(branch_server.db_url), timeout=30)
    with pytest.raises(NotFoundError):
        stranger.responses.retrieve(ids[ALPHA])

    # Continued like any response: the model gets what the subagent saw, then the input.
    alpha_first = by_agent(sim)[ALPHA][0].json["input"]
    sim.reset()
    sim.push(Reply("C is 3."))
    more = client.responses.create(
        model=MODEL,
        instructions=INSTRUCTIONS,
        previous_response_id=ids[ALPHA],
        input="And C?",
    )
    assert more.status == "completed" and more.output_text == "C is 3."
    sent = sim.requests("/v1/responses")[-1].json["input"]
    assert sent[: len(alpha_first)] == alpha_first
    assert [i.get("type") for i in sent[len(alpha_first) :]] == ["message", "message"]
    assert sent[-2]["role"] == "assistant" and sent[-1]["role"] == "user"

    # The admin agents view names every agent's own response.
    admin = AdminApi(branch_server.url, branch_server.db_url)
    try:
        accounts = admin.get(f"/responses/{root.id}/agents")
    finally:
        admin.close()
    named = {agent["agent_name"]: agent["response_id"] for agent in accounts["agents"]}
    assert named == {ROOT: root.id, **ids}


def test_a_tree_that_continues_chains_its_subagents_to_the_same_checkpoint(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client = branch_server.client(tenant, timeout=30)
    sim.push(Reply("Noted."))
    earlier = client.responses.create(model=MODEL, input="Remember: D is 4.")
    script_two_helpers(sim)
    root = create_tree(client, previous_response_id=earlier.id)
    assert root.status == "completed"
    ids = spawned_ids(root)
    for name in (ALPHA, BETA):
        own = client.responses.retrieve(ids[name])
        assert own.previous_response_id == earlier.id
        seen = list(client.responses.input_items.list(ids[name], order="asc"))
        # The root's new input and the subagent's task; the earlier turn is its parent's.
        assert len(seen) == 2
    # Continuing a subagent replays the earlier turn first (the chain verifies).
    sim.reset()
    sim.push(Reply("Yes."))
    more = client.responses.create(model=MODEL, previous_response_id=ids[BETA], input="Is D 4?")
    assert more.status == "completed"
    sent = sim.requests("/v1/responses")[-1].json["input"]
    assert text_of(sent[0]) == "Remember: D is 4."


def test_a_failed_subagent_is_stored_failed_with_its_reason(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client = branch_server.client(tenant, timeout=30)
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "beta", "message": "Find B."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("B is unknown."),
    )
    # beta's request is refused by the model server: its task ends errored, the root goes on.
    sim.push_for(BETA, Fail(status=400, message="The prompt is too long for this model."))
    root = create_tree(client)
    assert root.status == "completed"
    beta = client.responses.retrieve(spawned_ids(root)[BETA])
    assert beta.status == "failed"
    assert beta.error is not None and beta.error.code == "server_error"
    assert "too long" in beta.error.message
    # Its input is kept (what it was given); nothing continues from a failed turn.
    assert len(list(client.responses.input_items.list(beta.id))) == 2


def test_a_grandchild_of_a_background_tree_continues_from_what_it_saw(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    """A subagent's subagent (its prefix starts with its parent's, which starts with the
    root's), in a background tree (the commit of a queued response)."""
    client = branch_server.client(tenant, timeout=30)
    sources = f"{ALPHA}/sources"
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Find A."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1."),
    )
    sim.push_for(
        ALPHA,
        ToolCalls([Call("spawn_agent", {"task_name": "sources", "message": "Cite A."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1, cited."),
    )
    sim.push_for(sources, Reply("The source says A is 1."))
    queued = create_tree(client, background=True)
    deadline = time.monotonic() + 20
    found = queued
    while found.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        found = client.beta.responses.retrieve(queued.id, betas=BETAS)
    assert found.status == "completed"
    admin = AdminApi(branch_server.url, branch_server.db_url)
    try:
        accounts = admin.get(f"/responses/{queued.id}/agents")["agents"]
    finally:
        admin.close()
    named = {agent["agent_name"]: agent["response_id"] for agent in accounts}
    assert set(named) == {ROOT, ALPHA, sources}
    grandchild = client.responses.retrieve(named[sources])
    assert grandchild.status == "completed"
    assert grandchild.output_text == "The source says A is 1."
    first = by_agent(sim)[sources][0].json["input"]
    sim.reset()
    sim.push(Reply("Yes."))
    client.responses.create(model=MODEL, previous_response_id=named[sources], input="Sure?")
    sent = sim.requests("/v1/responses")[-1].json["input"]
    assert sent[: len(first)] == first
    assert len(sent) == len(first) + 2


def test_an_interrupted_subagent_is_stored_cancelled(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client = branch_server.client(tenant, timeout=30)
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Take your time."})]),
        ToolCalls([Call("interrupt_agent", {"target": "alpha"})]),
        Reply("Stopped it."),
    )
    sim.push_for(ALPHA, Reply("Too late.", delay=10))
    root = create_tree(client)
    assert root.status == "completed"
    alpha = client.responses.retrieve(spawned_ids(root)[ALPHA])
    assert alpha.status == "cancelled" and alpha.output == []


# -- stored completely: token ids, deletion, console links ---------------------------------


def test_continuing_from_a_subagent_is_accounted_against_its_own_token_ids(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    """A subagent keeps its last round's ids as its artifact: a continuation from it gets
    the token account and ``prompt_cache_diagnostics`` any continuation gets (here a
    multi-agent one, so its tools are the subagent's: token-exact, a cache hit)."""
    client = branch_server.client(tenant, timeout=30)
    script_two_helpers(sim)
    root = create_tree(client)
    alpha_id = spawned_ids(root)[ALPHA]
    alpha_last = by_agent(sim)[ALPHA][-1]
    admin = AdminApi(branch_server.url, branch_server.db_url)
    try:
        artifact = admin.get(f"/responses/{alpha_id}/token_account")["artifact"]
        assert artifact is not None
        assert artifact["prompt_tokens"] == alpha_last.prompt_tokens
        assert artifact["output_tokens"] == alpha_last.output_tokens

        sim.push_for(ROOT, Reply("C is 3."))
        more = client.beta.responses.create(
            model=MODEL,
            instructions=INSTRUCTIONS,
            input="And C?",
            multi_agent=MULTI,
            betas=BETAS,
            previous_response_id=alpha_id,
            prompt_cache_options={"comparison_response_id": alpha_id},
        )
        assert more.status == "completed"
        account = admin.get(f"/responses/{more.id}/token_account")["account"]
    finally:
        admin.close()
    assert account["status"] == "exact" and account["parent_id"] == alpha_id
    assert alpha_last.prompt_tokens and alpha_last.output_tokens
    assert account["parent_tokens"] == alpha_last.prompt_tokens + alpha_last.output_tokens
    assert account["reusable_tokens"] == account["parent_tokens"]
    assert account["expected_cached"] > 0
    assert account["measured_cached"] == account["expected_cached"]
    assert more.prompt_cache_diagnostics is not None
    assert more.prompt_cache_diagnostics.type == "cache_hit"


def test_a_plain_continuation_from_a_subagent_names_the_lost_tools(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    """The subagent's rounds had the six actions among their tools; a plain continuation
    renders without them. Its fingerprint (the subagent's is its tree's, actions included)
    names that change, so the loss is the tools', not the template's."""
    client = branch_server.client(tenant, timeout=30)
    script_two_helpers(sim)
    root = create_tree(client)
    alpha_id = spawned_ids(root)[ALPHA]
    admin = AdminApi(branch_server.url, branch_server.db_url)
    try:
        sim.push(Reply("C is 3."))
        more = client.responses.create(
            model=MODEL,
            instructions=INSTRUCTIONS,
            input="And C?",
            previous_response_id=alpha_id,
            prompt_cache_options={"comparison_response_id": alpha_id},
        )
        assert more.status == "completed"
        account = admin.get(f"/responses/{more.id}/token_account")["account"]
        lineage = admin.get(f"/responses/{more.id}/lineage")
    finally:
        admin.close()
    assert account["parent_id"] == alpha_id and account["status"] == "diverged"
    assert account["cause"] == "fingerprint" and account["changes"] == ["tools"]
    # Where the tools render: in the subagent's prompt, before the history.
    assert account["divergence"]["region"] == "prompt"
    (turn,) = [t for t in lineage["ancestors"] if t["id"] == more.id]
    (change,) = turn["cache_break"]["changes"]
    assert change["component"] == "tools"
    assert all(f"'{name}'" in change["description"] for name in NAMES)
    assert more.prompt_cache_diagnostics is not None
    assert more.prompt_cache_diagnostics.type == "cache_miss"
    assert more.prompt_cache_diagnostics.reason == "tools_changed"


def test_deleting_the_root_deletes_its_subagents(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client = branch_server.client(tenant, timeout=30)
    script_two_helpers(sim)
    root = create_tree(client)
    ids = spawned_ids(root)
    tree = [root.id, *ids.values()]
    db_url = branch_server.db_url

    def left(table: str) -> int:
        return int(
            scalar(
                db_url,
                f"SELECT count(*) FROM {table} WHERE response_id IN (:a, :b, :c)",
                a=tree[0],
                b=tree[1],
                c=tree[2],
            )
        )

    assert left("agent_rounds") > 0 and left("token_artifacts") == 3
    # A subagent alone is refused, naming its root; nothing changes.
    with pytest.raises(BadRequestError) as refused:
        client.responses.delete(ids[ALPHA])
    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "subagent_response" and error["param"] == "response_id"
    assert root.id in error["message"]
    assert client.responses.retrieve(ids[ALPHA]).status == "completed"

    client.responses.delete(root.id)
    for response_id in tree:
        with pytest.raises(NotFoundError):
            client.responses.retrieve(response_id)
    with pytest.raises(NotFoundError):
        client.responses.create(model=MODEL, previous_response_id=ids[BETA], input="Still there?")
    assert left("agent_rounds") == 0 and left("token_artifacts") == 0
    deleted = scalar(
        db_url,
        "SELECT count(*) FROM responses WHERE spawned_by = :root AND deleted_at IS NOT NULL",
        root=root.id,
    )
    assert deleted == 2
    with pytest.raises(NotFoundError):
        client.responses.delete(root.id)


def test_the_console_links_each_subagent_to_its_response(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client = branch_server.client(tenant, timeout=30)
    script_two_helpers(sim)
    root = create_tree(client)
    ids = spawned_ids(root)
    with log_in(branch_server.url, create_admin_key(branch_server.db_url)) as http:
        page = http.get(f"/console/responses/{root.id}")
        assert page.status_code == 200, page.text
        shown = cells(page.text)
        assert shown[ROOT]["response"] == "this response"
        for name, response_id in ids.items():
            assert shown[name]["response"] == response_id
            assert f'href="/console/responses/{response_id}"' in page.text
            own = http.get(f"/console/responses/{response_id}")
            assert own.status_code == 200 and response_id in own.text
