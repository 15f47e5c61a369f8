"""Keep-warm treats an agent of a multi-agent tree waiting on its subagents as a paused
session (issue 37), on both databases, through the SDK against a simulator that publishes
vLLM's KV events from a small prefix cache.

The root spawns a subagent and waits on it; while the subagent works, another tenant's
long prompt evicts the root's prefix; the keep-warm loop re-warms it (the root's own
fields and items, one output token, the tree's session coordinates); the root's next
round, once its subagent answered, finds its prefix cached, and the re-warm's record (on
the root's response, in the admin lineage) says it paid off. Without keep-warm no
re-warm is sent and the root's next round comes back cold (the control).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_keep_warm import (
    BLOCK,
    admin_client,
    keep_warm_server,
    kv_simulator,
    words,
)
from tests.support.multi_agent import ALPHA, ROOT, by_agent, create_tree
from tests.support.tenants import create_tenant
from tests.support.waiting import eventually
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls
from tests.upstream_sim.state import RecordedRequest

# Room for the root's prefix (instructions, the six actions' schemas, the question) and
# its subagent's, not for another tenant's long prompt as well.
CAPACITY_BLOCKS = 160
# How long the subagent works: the root waits that long (eviction and re-warm happen then).
SUBAGENT_SECONDS = 6.0


@pytest.fixture(scope="module")
def tree_kv_sim(backend: str) -> Iterator[SimServer]:
    with kv_simulator(f"mkw-{backend}", CAPACITY_BLOCKS) as server:
        yield server


@pytest.fixture
def replica(tree_kv_sim: SimServer, backend: str) -> str:
    tree_kv_sim.reset()
    return f"mkw-{backend}-{time.monotonic_ns()}"


def rewarms(sim: SimServer) -> list[RecordedRequest]:
    return [r for r in sim.requests("/v1/responses") if r.json.get("max_output_tokens") == 1]


def run_waiting_tree(
    server: Any, sim: SimServer, *, kept_warm: bool
) -> tuple[Any, list[RecordedRequest], dict[str, list[RecordedRequest]]]:
    """The root spawns /root/alpha and waits on it; while it waits, another tenant's long
    prompt evicts the root's prefix (then, ``kept_warm``, the re-warm is waited for before
    the subagent answers). Returns the response, the re-warms sent and the tree's
    requests by agent."""
    sim.push_for(
        ROOT,
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Find A."})]),
        ToolCalls([Call("wait_agent", {})]),
        # A re-warm speaks as the root (its agentic_context): it takes the next answer.
        *([Reply("warm")] if kept_warm else []),
        Reply("A is 1."),
    )
    sim.push_for(ALPHA, Reply("A is 1.", delay=SUBAGENT_SECONDS))
    client = server.client(create_tenant(server.db_url), timeout=60)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(create_tree, client)
        eventually(lambda: len(by_agent(sim).get(ROOT, ())) >= 2, "the root waiting")
        time.sleep(0.5)  # a few of the loop's ticks: it sees the waiting root's prefix
        sim.push(Reply("busy done"))
        other = server.client(create_tenant(server.db_url), timeout=30)
        other.responses.create(model="sim-model", input=words("busy", 1600))
        if kept_warm:
            eventually(lambda: bool(rewarms(sim)), "a re-warm of the waiting root")
        response = running.result(timeout=60)
    return response, rewarms(sim), by_agent(sim)


def test_a_root_waiting_on_its_subagent_is_kept_warm(
    backend: str, fresh_db: str, tree_kv_sim: SimServer, replica: str, tmp_path: Path
) -> None:
    with (
        keep_warm_server(
            backend, fresh_db, tree_kv_sim, replica, tmp_path, router_agentic_context=True
        ) as server,
        admin_client(server) as admin,
    ):
        response, sent, requests = run_waiting_tree(server, tree_kv_sim, kept_warm=True)
        assert response.status == "completed"
        (rewarm,) = sent
        waiting = requests[ROOT][1]
        # The waiting root's prefix on its own coordinates: session, salt, agent.
        assert rewarm.headers["x-session-id"] == waiting.headers["x-session-id"]
        assert rewarm.json["cache_salt"] == waiting.json["cache_salt"]
        assert rewarm.json["tools"] == waiting.json["tools"]
        context = json.loads(rewarm.json["vllm_xargs"]["agentic_context"])
        assert context["agent_id"] == ROOT
        assert rewarm.json["input"][: len(waiting.json["input"])] == waiting.json["input"]
        assert rewarm.json["input"][-1]["name"] == "wait_agent"
        # The root's round after the wait came back warm: every full block of the paused
        # round's prompt was cached.
        back = requests[ROOT][-1]
        assert waiting.prompt_tokens is not None and back.cached_tokens is not None
        assert back.cached_tokens >= waiting.prompt_tokens // BLOCK * BLOCK > 0
        lineage = admin.get(f"/responses/{response.id}/lineage").json()
        (record,) = lineage["ancestors"][-1]["rewarms"]
        assert record["outcome"] == "paid_off" and record["replica"] == replica
        assert record["reason"] == "evicted while paused"
        assert record["next_cached_tokens"] == back.cached_tokens


def test_without_keep_warm_the_waiting_root_comes_back_cold(
    backend: str, fresh_db: str, tree_kv_sim: SimServer, replica: str, tmp_path: Path
) -> None:
    with keep_warm_server(
        backend,
        fresh_db,
        tree_kv_sim,
        replica,
        tmp_path,
        router_agentic_context=True,
        keep_warm_enabled=False,
    ) as server:
        response, sent, requests = run_waiting_tree(server, tree_kv_sim, kept_warm=False)
    assert response.status == "completed"
    assert sent == []
    waiting, back = requests[ROOT][1], requests[ROOT][-1]
    assert waiting.prompt_tokens is not None
    assert (back.cached_tokens or 0) < waiting.prompt_tokens // BLOCK * BLOCK
