"""Automatic compaction (``context_management``) in a multi-agent tree (issue 37), through
the SDK's beta client against the simulator, on both databases: every agent whose prompt
passes ``compact_threshold`` runs its own summary round first (the summary request of a
single-agent compaction, on its own routing coordinates), its ``compaction`` item is shown
with its name and stored like a single-agent turn's, and the tree goes on from the
compacted window; a tree that never passes the threshold sends what it would without it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from agentic_api.turns.prepare.summary_request import SUMMARY_REQUEST
from agentic_api.wire.summary import SUMMARY_HEADER
from tests.conftest import RunningServer
from tests.support.multi_agent import (
    ALPHA,
    BETAS,
    INSTRUCTIONS,
    MODEL,
    ROOT,
    action_results,
    agent_accounts,
    by_agent,
    check_tree,
    create_tree,
    dumped,
    root_delegates,
    script_two_helpers,
    spawned_ids,
    tree_server_fixture,
)
from tests.support.tenants import create_tenant
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls
from tests.upstream_sim.state import RecordedRequest

# A tree's prompt is larger than a plain turn's (the six actions' schemas): about 1,000
# to 1,500 tokens here by either count (the simulator's tokenizer, or bytes / 4), under
# the threshold; the report is about 6,000, past it.
LONG = "The quarterly report lists every shipment by port and date. " * 400
COMPACT: Any = [{"type": "compaction", "compact_threshold": 4000}]
NEVER: Any = [{"type": "compaction", "compact_threshold": 1_000_000}]
SUMMARY = "NOTES: a quarterly shipment report was shared."


tree_server = tree_server_fixture("tree_server", multi_agent_max_depth=1)


@pytest.fixture
def tree_client(tree_server: RunningServer) -> Iterator[OpenAI]:
    yield tree_server.client(create_tenant(tree_server.db_url), timeout=30)


def texts(rec: RecordedRequest) -> list[str]:
    """Each input item's text as the upstream got it (message parts joined; other items
    by type)."""
    found: list[str] = []
    for item in rec.json["input"]:
        parts = item.get("content")
        if isinstance(parts, list):
            found.append("".join(str(part.get("text", "")) for part in parts))
        else:
            found.append(str(item.get("type")))
    return found


def asks_summary(rec: RecordedRequest) -> bool:
    return texts(rec)[-1] == SUMMARY_REQUEST


def agent_rounds(server: RunningServer, response_id: str) -> dict[str, int]:
    return {
        name: len(agent["rounds"]) for name, agent in agent_accounts(server, response_id).items()
    }


def starts_at_the_summary(sim: SimServer, new_input: str) -> None:
    """The one request a continuation sent starts its window at the compaction item (the
    report is gone from it) and ends with ``new_input``."""
    (rec,) = sim.requests("/v1/responses")
    sent = texts(rec)
    assert sent[0] == SUMMARY_HEADER + SUMMARY and sent[-1] == new_input
    assert not any(LONG in text for text in sent)


def test_the_root_compacts_and_the_tree_goes_on(
    tree_client: OpenAI, tree_server: RunningServer, sim: SimServer
) -> None:
    sim.push(Reply("noted"))
    first = tree_client.responses.create(model=MODEL, instructions=INSTRUCTIONS, input=LONG)
    sim.state.clear_recordings()
    sim.push_for(
        ROOT,
        Reply(SUMMARY),
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Find A."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1."),
    )
    sim.push_for(ALPHA, Reply("A is 1."))
    response = create_tree(
        tree_client, "what next?", previous_response_id=first.id, context_management=COMPACT
    )
    assert response.status == "completed"
    output = dumped(response)
    (compaction,) = [item for item in output if item["type"] == "compaction"]
    assert output[0] == compaction
    assert compaction["agent"] == {"agent_name": ROOT}
    assert compaction["encrypted_content"] == SUMMARY and compaction["id"].startswith("cmp_")
    assert output[-1]["content"][0]["text"] == "A is 1."

    requests = by_agent(sim)
    summary, answer, waited, last = requests[ROOT]
    # The root's own summary round: its whole prompt (the long report), then the question.
    assert LONG in texts(summary)[0] and asks_summary(summary)
    assert summary.json["tool_choice"] == "none"
    assert summary.json["vllm_xargs"] == answer.json["vllm_xargs"]
    # Then its rounds on the compacted window: the summary, then the new input.
    assert texts(answer) == [SUMMARY_HEADER + SUMMARY, "what next?"]
    assert not any(asks_summary(rec) for rec in (waited, last))
    # The subagent still starts with its parent's prompt as the spawning round sent it,
    # and reuses every full block of it.
    (child,) = requests[ALPHA]
    assert child.json["input"][: len(answer.json["input"])] == answer.json["input"]
    assert answer.prompt_tokens is not None
    block = sim.config.block_size
    assert child.cached_tokens == answer.prompt_tokens // block * block > 0
    # Accounted like every other round: usage and the agent's rounds count it.
    assert response.usage is not None
    recs = sim.requests("/v1/responses")
    assert response.usage.input_tokens == sum(rec.prompt_tokens or 0 for rec in recs)
    assert agent_rounds(tree_server, response.id) == {ROOT: 4, ALPHA: 1}
    stored = tree_client.beta.responses.retrieve(response.id, betas=BETAS)
    assert dumped(stored) == output

    # A continuation's window starts at the compaction item: the report is gone from it.
    sim.state.clear_recordings()
    sim.push_for(ROOT, Reply("then invoice"))
    after = create_tree(
        tree_client, "and then?", previous_response_id=response.id, context_management=COMPACT
    )
    assert after.status == "completed"
    assert [item.type for item in after.output] == ["message"]
    starts_at_the_summary(sim, "and then?")


def test_a_forced_tool_choice_applies_to_the_first_round_after_the_summary(
    tree_client: OpenAI, tree_server: RunningServer, sim: SimServer
) -> None:
    sim.push(Reply("noted"))
    first = tree_client.responses.create(model=MODEL, instructions=INSTRUCTIONS, input=LONG)
    sim.state.clear_recordings()
    sim.push_for(
        ROOT,
        Reply(SUMMARY),
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Find A."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1."),
    )
    sim.push_for(ALPHA, Reply("A is 1."))
    response = create_tree(
        tree_client,
        "what next?",
        previous_response_id=first.id,
        context_management=COMPACT,
        tool_choice="required",
    )
    assert response.status == "completed"
    root_rounds = [
        rec.json.get("tool_choice")
        for rec in sim.requests("/v1/responses")
        if not asks_summary(rec) and texts(rec)[-1] != "Find A."
    ]
    # The summary round is not the task's first round: the one after it is forced.
    assert root_rounds[0] == "required"
    assert all(choice == "auto" for choice in root_rounds[1:])


def test_a_subagent_compacts_on_its_own(
    tree_client: OpenAI, tree_server: RunningServer, sim: SimServer
) -> None:
    root_delegates(sim, "Find A.", "A is 1.")
    # The subagent's own round grows its prompt past the threshold (a long argument only
    # it sees), so only it compacts.
    sim.push_for(
        ALPHA,
        ToolCalls([Call("list_agents", {"path_prefix": LONG}, call_id="call_list")]),
        Reply(SUMMARY),
        Reply("A is 1."),
    )
    stream = create_tree(tree_client, context_management=COMPACT, stream=True)
    events = [event.model_dump(exclude_none=True) for event in stream]
    terminal = events[-1]
    assert terminal["type"] == "response.completed"
    output = terminal["response"]["output"]
    (compaction,) = [item for item in output if item["type"] == "compaction"]
    assert compaction["agent"] == {"agent_name": ALPHA}
    assert compaction["encrypted_content"] == SUMMARY
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == output

    requests = by_agent(sim)
    assert not any(asks_summary(rec) for rec in requests[ROOT])
    first, summary, answer = requests[ALPHA]
    assert not asks_summary(first) and asks_summary(summary)
    # Its summary request extends what its first round sent (the parent's prefix, its
    # task, its call and the call's result): the model server has most of it cached.
    assert summary.json["input"][: len(first.json["input"])] == first.json["input"]
    assert summary.json["vllm_xargs"] == first.json["vllm_xargs"]
    # Its next round: the summary, then the call its unanswered output answers, the output.
    assert [item["type"] for item in answer.json["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert texts(answer)[0] == SUMMARY_HEADER + SUMMARY
    assert answer.json["input"][1]["call_id"] == answer.json["input"][2]["call_id"] == "call_list"
    # The subagent's answer reached its parent.
    (waited,) = action_results(output, "wait_agent")
    agents = waited["agents"]
    assert [(a["agent_name"], a["final_answer"]) for a in agents] == [(ALPHA, "A is 1.")]
    assert agent_rounds(tree_server, terminal["response"]["id"]) == {ROOT: 3, ALPHA: 3}

    # Its own response stores the item after what it saw: continued with
    # context_management, its window starts there.
    own_id = spawned_ids(output)[ALPHA]
    own = tree_client.responses.retrieve(own_id)
    assert own.status == "completed"
    # Its response lists the compaction among what it produced, as a single-agent
    # response lists its own (without the tree's agent attribution).
    own_output = dumped(own)
    assert [item["type"] for item in own_output] == ["function_call", "compaction", "message"]
    shown = {key: value for key, value in compaction.items() if key != "agent"}
    assert own_output[1] == shown
    replayed = list(tree_client.responses.retrieve(own_id, stream=True))
    assert replayed[-1].type == "response.completed"
    assert dumped(replayed[-1].response) == own_output
    sim.state.clear_recordings()
    sim.push(Reply("B is 2."))
    after = tree_client.responses.create(
        model=MODEL,
        instructions=INSTRUCTIONS,
        previous_response_id=own_id,
        input="and B?",
        context_management=COMPACT,
    )
    assert after.status == "completed" and after.output_text == "B is 2."
    starts_at_the_summary(sim, "and B?")


def test_a_tree_below_the_threshold_is_unchanged(
    tree_client: OpenAI, tree_server: RunningServer, sim: SimServer
) -> None:
    script_two_helpers(sim)
    response = create_tree(tree_client, context_management=NEVER)
    assert response.status == "completed"
    output = dumped(response)
    assert "compaction" not in [item["type"] for item in output]
    # The same tree as without context_management: its rounds, and each subagent's first
    # request starting with its parent's prompt (every full block reused).
    check_tree(output, sim)
    assert not any(asks_summary(rec) for rec in sim.requests("/v1/responses"))
    assert all("context_management" not in rec.json for rec in sim.requests("/v1/responses"))
