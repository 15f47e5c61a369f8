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

from dataclasses import dataclass
from typing import Any

import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from agentic_api.turns.kinds.multi_agent.actions import NAMES
from tests.conftest import RunningServer
from tests.support.admin_api import AdminApi
from tests.support.console import cells, log_in
from tests.support.multi_agent import (
    ALPHA,
    BETA,
    INSTRUCTIONS,
    MODEL,
    QUESTION,
    ROOT,
    agent_accounts,
    by_agent,
    create_tree,
    dumped,
    finished,
    root_delegates,
    script_two_helpers,
    tree_server_fixture,
)
from tests.support.multi_agent import spawned_ids as spawned_in
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.upstream_sim import Call, Fail, Reply, SimServer, ToolCalls
from tests.upstream_sim.state import RecordedRequest

branch_server = tree_server_fixture("branch_server")


@pytest.fixture
def tenant(branch_server: RunningServer) -> TenantKeys:
    return create_tenant(branch_server.db_url)


def spawned_ids(response: Any) -> dict[str, str]:
    """The subagents' response ids, as the spawns' results in an SDK response tell them."""
    return spawned_in(dumped(response))


def two_helpers_tree(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> tuple[OpenAI, Any, dict[str, str]]:
    """The tenant's client, the tree of ``script_two_helpers`` it created, and its
    subagents' response ids."""
    client = server.client(tenant, timeout=30)
    script_two_helpers(sim)
    root = create_tree(client)
    return client, root, spawned_ids(root)


def text_of(item: Any) -> str:
    return "".join(part["text"] for part in item["content"])


def test_each_subagent_is_a_stored_response_that_continues(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client, root, ids = two_helpers_tree(branch_server, tenant, sim)
    assert root.status == "completed"
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
    accounts = agent_accounts(branch_server, root.id)
    assert {name: agent["response_id"] for name, agent in accounts.items()} == {
        ROOT: root.id,
        **ids,
    }


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
    root_delegates(sim, "Find A.", "A is 1.")
    sim.push_for(
        ALPHA,
        ToolCalls([Call("spawn_agent", {"task_name": "sources", "message": "Cite A."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1, cited."),
    )
    sim.push_for(sources, Reply("The source says A is 1."))
    queued = create_tree(client, background=True)
    assert finished(client, queued).status == "completed"
    named = {
        name: agent["response_id"]
        for name, agent in agent_accounts(branch_server, queued.id).items()
    }
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


@dataclass
class FromAlpha:
    """A continuation from a tree's subagent alpha, compared with it: alpha's last request
    and id, the continuation, and what the admin API tells of them."""

    alpha_last: RecordedRequest
    alpha_id: str
    more: Any
    artifact: dict[str, Any] | None
    account: dict[str, Any]
    lineage: dict[str, Any]


def continue_from_alpha(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, *, multi_agent: bool
) -> FromAlpha:
    client, _, ids = two_helpers_tree(server, tenant, sim)
    alpha_id = ids[ALPHA]
    alpha_last = by_agent(sim)[ALPHA][-1]
    compared: Any = {"comparison_response_id": alpha_id}
    if multi_agent:
        sim.push_for(ROOT, Reply("C is 3."))
        more = create_tree(
            client, "And C?", previous_response_id=alpha_id, prompt_cache_options=compared
        )
    else:
        sim.push(Reply("C is 3."))
        more = client.responses.create(
            model=MODEL,
            instructions=INSTRUCTIONS,
            input="And C?",
            previous_response_id=alpha_id,
            prompt_cache_options=compared,
        )
    assert more.status == "completed"
    with AdminApi(server.url, server.db_url) as admin:
        return FromAlpha(
            alpha_last,
            alpha_id,
            more,
            admin.get(f"/responses/{alpha_id}/token_account")["artifact"],
            admin.get(f"/responses/{more.id}/token_account")["account"],
            admin.get(f"/responses/{more.id}/lineage"),
        )


def test_continuing_from_a_subagent_is_accounted_against_its_own_token_ids(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    """A subagent keeps its last round's ids as its artifact: a continuation from it gets
    the token account and ``prompt_cache_diagnostics`` any continuation gets (here a
    multi-agent one, so its tools are the subagent's: token-exact, a cache hit)."""
    found = continue_from_alpha(branch_server, tenant, sim, multi_agent=True)
    alpha_last, artifact, account = found.alpha_last, found.artifact, found.account
    assert artifact is not None
    assert artifact["prompt_tokens"] == alpha_last.prompt_tokens
    assert artifact["output_tokens"] == alpha_last.output_tokens
    assert account["status"] == "exact" and account["parent_id"] == found.alpha_id
    assert alpha_last.prompt_tokens and alpha_last.output_tokens
    assert account["parent_tokens"] == alpha_last.prompt_tokens + alpha_last.output_tokens
    assert account["reusable_tokens"] == account["parent_tokens"]
    assert account["expected_cached"] > 0
    assert account["measured_cached"] == account["expected_cached"]
    assert found.more.prompt_cache_diagnostics is not None
    assert found.more.prompt_cache_diagnostics.type == "cache_hit"


def test_a_plain_continuation_from_a_subagent_names_the_lost_tools(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    """The subagent's rounds had the six actions among their tools; a plain continuation
    renders without them. Its fingerprint (the subagent's is its tree's, actions included)
    names that change, so the loss is the tools', not the template's."""
    found = continue_from_alpha(branch_server, tenant, sim, multi_agent=False)
    account, more = found.account, found.more
    assert account["parent_id"] == found.alpha_id and account["status"] == "diverged"
    assert account["cause"] == "fingerprint" and account["changes"] == ["tools"]
    # Where the tools render: in the subagent's prompt, before the history.
    assert account["divergence"]["region"] == "prompt"
    (turn,) = [t for t in found.lineage["ancestors"] if t["id"] == more.id]
    (change,) = turn["cache_break"]["changes"]
    assert change["component"] == "tools"
    assert all(f"'{name}'" in change["description"] for name in NAMES)
    assert more.prompt_cache_diagnostics is not None
    assert more.prompt_cache_diagnostics.type == "cache_miss"
    assert more.prompt_cache_diagnostics.reason == "tools_changed"


def test_deleting_the_root_deletes_its_subagents(
    branch_server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    client, root, ids = two_helpers_tree(branch_server, tenant, sim)
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
    _, root, ids = two_helpers_tree(branch_server, tenant, sim)
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
