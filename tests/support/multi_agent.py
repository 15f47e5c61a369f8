"""What the multi-agent tests (``tests/api/test_multi_agent_*.py``) share: the server they
run a tree on, the trees they script on the simulator, how they ask for one (the SDK's
beta client) and how they read what came back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.conftest import RunningServer, app_server
from tests.support.admin_api import AdminApi
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls
from tests.upstream_sim.state import RecordedRequest, agent_of

MODEL = "sim-model"
BETAS: Any = ["responses_multi_agent=v1"]
MULTI: Any = {"enabled": True, "max_concurrent_subagents": 2}
ROOT, ALPHA, BETA = "/root", "/root/alpha", "/root/beta"
INSTRUCTIONS = "You lead a small team. Split the work, wait for it, then answer in one line."
QUESTION = "What are the values of A and B? Ask one helper for each and report both."


# -- the server -----------------------------------------------------------------------------


@contextmanager
def tree_app(
    backend: str, db_url: str, upstream_url: str, data_dir: Path, **overrides: object
) -> Iterator[RunningServer]:
    """Our app for trees: with the router's ``agentic_context``, by which the simulator
    tells the agents apart (``push_for``, ``by_agent``)."""
    with app_server(
        backend, db_url, upstream_url, data_dir, router_agentic_context=True, **overrides
    ) as running:
        yield running


def tree_server_fixture(name: str, **overrides: object) -> Any:
    """A module-scoped fixture called ``name``: ``tree_app`` on the session's database and
    simulator, with ``overrides``."""

    @pytest.fixture(scope="module", name=name)
    def running(
        backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[RunningServer]:
        with tree_app(
            backend, db_url, sim.url, tmp_path_factory.mktemp(name), **overrides
        ) as server:
            yield server

    return running


# -- scripted trees -------------------------------------------------------------------------


def script_two_helpers(sim: SimServer) -> None:
    """The root spawns alpha and beta in one round, waits, answers both values."""
    sim.push_for(
        ROOT,
        ToolCalls(
            [
                Call("spawn_agent", {"task_name": "alpha", "message": "Find A."}),
                Call("spawn_agent", {"task_name": "beta", "message": "Find B."}),
            ]
        ),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1 and B is 2."),
    )
    sim.push_for(ALPHA, Reply("A is 1."))
    sim.push_for(BETA, Reply("B is 2."))


def root_delegates(sim: SimServer, task: str, answer: str | None) -> None:
    """The root spawns alpha on ``task``, waits for it, then answers ``answer`` (None: the
    root's script ends there, for a tree that never gets that far)."""
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": task})]),
        ToolCalls([Call("wait_agent", {})]),
        *([Reply(answer)] if answer is not None else []),
    )


def check_tree(output: list[dict[str, Any]], sim: SimServer) -> None:
    """The tree's output and upstream requests, as the module describes them."""
    assert all(item["agent"]["agent_name"] in (ROOT, ALPHA, BETA) for item in output)
    calls = [i for i in output if i["type"] == "multi_agent_call"]
    assert [(c["action"], c["agent"]["agent_name"]) for c in calls] == [
        ("spawn_agent", ROOT),
        ("spawn_agent", ROOT),
        ("wait_agent", ROOT),
    ]
    results = {i["call_id"]: i for i in output if i["type"] == "multi_agent_call_output"}
    assert set(results) == {c["call_id"] for c in calls}
    spawned = [json.loads(results[c["call_id"]]["output"][0]["text"]) for c in calls[:2]]
    assert [s["agent_name"] for s in spawned] == [ALPHA, BETA]
    waited = json.loads(results[calls[2]["call_id"]]["output"][0]["text"])
    answers = {a["agent_name"]: (a["status"], a["final_answer"]) for a in waited["agents"]}
    assert answers == {ALPHA: ("completed", "A is 1."), BETA: ("completed", "B is 2.")}
    messages = [
        (i["author"], i["recipient"], i["content"][0]["text"])
        for i in output
        if i["type"] == "agent_message"
    ]
    assert (ROOT, ALPHA, "Find A.") in messages and (ROOT, BETA, "Find B.") in messages
    assert (ALPHA, ROOT, "A is 1.") in messages and (BETA, ROOT, "B is 2.") in messages
    final = output[-1]
    assert final["type"] == "message" and final["agent"]["agent_name"] == ROOT
    assert final["phase"] == "final_answer"
    assert final["content"][0]["text"] == "A is 1 and B is 2."

    requests = by_agent(sim)
    assert {name: len(recs) for name, recs in requests.items()} == {ROOT: 3, ALPHA: 1, BETA: 1}
    everyone = [rec for recs in requests.values() for rec in recs]
    sessions = {rec.headers.get("x-session-id") for rec in everyone}
    assert len(sessions) == 1 and None not in sessions
    assert {rec.json.get("session_id") for rec in everyone} == sessions
    contexts = [json.loads(rec.json["vllm_xargs"]["agentic_context"]) for rec in everyone]
    assert len({c["program_id"] for c in contexts}) == 1
    session = next(iter(sessions))
    assert {c["agent_id"]: c["task_id"] for c in contexts} == {
        name: f"{session}{name}" for name in (ROOT, ALPHA, BETA)
    }
    first_root = requests[ROOT][0]
    block = sim.config.block_size
    assert first_root.prompt_tokens is not None
    expected = first_root.prompt_tokens // block * block
    assert expected > 0
    firsts = sorted((requests[name][0] for name in (ALPHA, BETA)), key=lambda rec: rec.index)
    # Every full block of the parent's prompt is reused by the first child to arrive:
    # measured == expected (the second may also reuse its sibling's first task block).
    assert firsts[0].cached_tokens == expected
    assert (firsts[1].cached_tokens or 0) >= expected
    for name in (ALPHA, BETA):
        child = requests[name][0]
        # Same instructions and tools, then the parent's history, then the task.
        for key in ("instructions", "tools", "cache_salt"):
            assert child.json[key] == first_root.json[key]
        parent_input = first_root.json["input"]
        assert child.json["input"][: len(parent_input)] == parent_input
        assert len(child.json["input"]) == len(parent_input) + 1
        assert "Find" in child.json["input"][-1]["content"][0]["text"]


def create_tree(client: OpenAI, input: Any = QUESTION, **kwargs: Any) -> Any:
    return client.beta.responses.create(
        model=MODEL,
        instructions=INSTRUCTIONS,
        input=input,
        multi_agent=MULTI,
        betas=BETAS,
        **kwargs,
    )


def finished(client: OpenAI, queued: Any, seconds: float = 20) -> Any:
    """A background tree, retrieved (on the beta path) until it is no longer running."""
    deadline = time.monotonic() + seconds
    found = queued
    while found.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        found = client.beta.responses.retrieve(queued.id, betas=BETAS)
    return found


# -- reading what came back -----------------------------------------------------------------


def by_agent(sim: SimServer) -> dict[str, list[RecordedRequest]]:
    """The simulator's requests by the agent that sent them, in order."""
    found: dict[str, list[RecordedRequest]] = {}
    for rec in sim.requests("/v1/responses"):
        found.setdefault(agent_of(rec.json) or "?", []).append(rec)
    return found


def dumped(response: Any) -> list[dict[str, Any]]:
    """An SDK response's output as plain dicts."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def action_results(output: list[dict[str, Any]], action: str) -> list[Any]:
    """The results (parsed) of every ``action`` in a tree's output, in order."""
    return [
        json.loads(item["output"][0]["text"])
        for item in output
        if item["type"] == "multi_agent_call_output" and item["action"] == action
    ]


def spawned_ids(output: list[dict[str, Any]]) -> dict[str, str]:
    """The subagents' response ids, as the spawns' results tell them."""
    return {
        result["agent_name"]: result["response_id"]
        for result in action_results(output, "spawn_agent")
        if "response_id" in result
    }


def agent_accounts(server: RunningServer, response_id: str) -> dict[str, dict[str, Any]]:
    """``GET /admin/v1/responses/{id}/agents``, by agent name."""
    with AdminApi(server.url, server.db_url) as admin:
        accounts = admin.get(f"/responses/{response_id}/agents")
    return {agent["agent_name"]: agent for agent in accounts["agents"]}


def events_of(events: list[dict[str, Any]], item_id: str) -> list[dict[str, Any]]:
    """The stream events of one output item, in order."""
    return [
        e
        for e in events
        if e.get("item_id") == item_id or (e.get("item") or {}).get("id") == item_id
    ]
