"""The gateway's own placement over named replicas (``AGENTIC_UPSTREAM_REPLICAS``), on
SQLite and PostgreSQL: our server in front of simulators, each publishing vLLM's KV
events from its own prefix cache. A session goes to its hashed home and stays with its
prefix; a saturated replica (its /metrics) spills a round and the prefix follows it; an
emptied cache is never placed on; a replica that refuses connections is ejected and the
round fails over once (never twice); one failing health is ejected by the probe; every
round (tool loop, prewarm) is placed; decisions show in the admin timeline, the trace and
/metrics; one upstream URL keeps sending to that URL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from agentic_api.cache.placement import home_of
from lineage import resolve_stateless_session
from tests.conftest import app_server
from tests.support.console import cells, log_in
from tests.support.mcp_server import start_mcp_server
from tests.support.placement import kv_sims, placing_gateway, served, wait_probed, words
from tests.support.spans import recorded_spans
from tests.support.tenants import create_admin_key, create_tenant
from tests.support.waiting import eventually, metric
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls


@pytest.fixture(scope="module")
def sims(backend: str) -> Iterator[list[SimServer]]:
    with kv_sims(2, f"pl-{backend}") as started:
        yield started


@pytest.fixture
def names(sims: list[SimServer]) -> list[str]:
    for sim in sims:
        sim.reset()
    # Prometheus series live in this process: replica names of the test's own.
    stamp = time.monotonic_ns()
    return [f"r{i}-{stamp}" for i in range(len(sims))]


def own_names(prefix: str, count: int) -> list[str]:
    stamp = time.monotonic_ns()
    return [f"{prefix}{i}-{stamp}" for i in range(count)]


def test_each_session_goes_home_and_stays_with_its_prefix(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    with placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway:
        for index, name in enumerate(names):
            sim, other = sims[index], sims[1 - index]
            conversation = gateway.conversation(home=name)
            # Prompts of their own: a prefix both shared would be resident on both.
            first = gateway.turn(conversation, words(f"task{index}-", 100))
            assert served(sim, conversation.id) == 1
            # The replica's events show the turn's prompt + output resident there.
            gateway.wait_resident(first.id, name)
            second = gateway.turn(conversation, "and then?")
            third = gateway.turn(conversation, "and after that?")
            assert served(sim, conversation.id) == 3
            assert served(other, conversation.id) == 0
            assert second.usage is not None and third.usage is not None
            assert second.usage.input_tokens_details.cached_tokens > 0
            assert third.usage.input_tokens_details.cached_tokens > 0
            decisions = gateway.placements(conversation)
            assert [(d["replica"], d["reason"]) for d in decisions] == [
                (name, "home"),
                (name, "resident_prefix"),
                (name, "resident_prefix"),
            ]
            assert all(d["home"] == name and d["purpose"] == "turn" for d in decisions)
            won = {c["replica"]: c["resident_tokens"] for c in decisions[1]["candidates"]}
            assert won[name] > 0 and won[names[1 - index]] == 0
        for name in names:
            assert metric("agentic_placements_total", replica=name, reason="home") == 1
            assert metric("agentic_placements_total", replica=name, reason="resident_prefix") == 2
            assert metric("agentic_placement_resident_tokens_total", replica=name) > 0
        exposition = httpx.get(f"{gateway.server.url}/metrics").text
        assert f'agentic_placements_total{{reason="home",replica="{names[0]}"}} 1.0' in exposition


def test_a_saturated_replica_spills_and_the_prefix_follows(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    home, away = sims
    with placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway:
        conversation = gateway.conversation(home=names[0])
        gateway.turn(conversation, words("task", 100))
        # The home is saturated now (requests waiting past the limit) and the probe sees it.
        home.state.load = (9.0, 0.5)
        wait_probed(home)
        spilled = gateway.turn(conversation, "next step")
        assert (served(home, conversation.id), served(away, conversation.id)) == (1, 1)
        home.state.load = (0.0, 0.1)
        wait_probed(home)
        # The spilled turn's prompt + output are the longest prefix now: it stays there.
        gateway.wait_resident(spilled.id, names[1])
        last = gateway.turn(conversation, "and the last one")
        assert (served(home, conversation.id), served(away, conversation.id)) == (1, 2)
        assert last.usage is not None and last.usage.input_tokens_details.cached_tokens > 0
        assert [(d["replica"], d["reason"]) for d in gateway.placements(conversation)] == [
            (names[0], "home"),
            (names[1], "spill_load"),
            (names[1], "resident_prefix"),
        ]


def test_an_emptied_cache_is_never_placed_on(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    """vLLM's cache emptied (AllBlocksCleared, as a reset or /checkpoint/prepare sends):
    the next round finds nothing resident there; it is placed on the previous round's
    replica as its home, claiming no resident tokens."""
    with placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway:
        conversation = gateway.conversation(home=names[0])
        first = gateway.turn(conversation, words("task", 100))
        gateway.wait_resident(first.id, names[0])
        httpx.post(f"{sims[0].url}/_sim/reset_prefix_cache")
        eventually(lambda: gateway.resident_on(first.id, names[0]) == 0, "the cleared cache")
        # Past the event lag: the previous round's replica is no longer presumed to hold it.
        time.sleep(gateway.server.settings.placement_event_lag_seconds)
        second = gateway.turn(conversation, "and then?")
        assert second.usage is not None
        assert second.usage.input_tokens_details.cached_tokens == 0
        decision = gateway.placements(conversation)[-1]
        assert (decision["replica"], decision["reason"]) == (names[0], "home")
        assert all(c["resident_tokens"] == 0 for c in decision["candidates"])


def test_the_console_timeline_says_where_each_turn_went(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    with placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway:
        conversation = gateway.conversation(home=names[1])
        first = gateway.turn(conversation, words("task", 60))
        gateway.wait_resident(first.id, names[1])
        second = gateway.turn(conversation, "and then?")
        server = gateway.server
        with log_in(server.url, create_admin_key(server.db_url)) as console:
            page = console.get(
                f"/console/tenants/{gateway.tenant.id}/timeline",
                params={"session": conversation.id},
            )
        assert page.status_code == 200, page.text
        shown = cells(page.text)
        assert shown[first.id]["placed"] == f"{names[1]} home , 0 resident"
        resident = gateway.placements(conversation)[-1]["candidates"][1]["resident_tokens"]
        assert resident > 0
        assert shown[second.id]["placed"] == f"{names[1]} resident_prefix , {resident:,} resident"


def test_a_refused_round_fails_over_once_and_the_replica_is_ejected(
    backend: str, fresh_db: str, tmp_path: Path
) -> None:
    names = own_names("f", 2)
    # A slow probe: the round, not the probe, finds the replica gone.
    with (
        kv_sims(2, f"pf-{backend}") as sims,
        placing_gateway(
            backend, fresh_db, sims, names, tmp_path, placement_probe_seconds=60
        ) as gateway,
    ):
        gone, alive = sims
        conversation = gateway.conversation(home=names[0])
        gone.stop()
        first = gateway.turn(conversation, words("task", 50))
        assert first.status == "completed"
        assert served(alive, conversation.id) == 1
        assert metric("agentic_replica_ejections_total", replica=names[0], cause="refused") == 1
        # Ejected: the next round goes straight to the other replica.
        gateway.turn(conversation, "again")
        assert served(alive, conversation.id) == 2
        decisions = gateway.placements(conversation)
        assert [(d["replica"], d["reason"], d["round"]) for d in decisions] == [
            (names[0], "home", 0),
            (names[1], "failover", 0),
            (names[1], "resident_prefix", 0),
        ]
        assert metric("agentic_placements_total", replica=names[1], reason="failover") == 1


def test_a_round_fails_over_at_most_once(backend: str, fresh_db: str, tmp_path: Path) -> None:
    """Two of three replicas refuse: the round tries its first choice and one other, then
    the client gets the refusal; nothing is stored, the third replica never sees it, not
    even when the client retries with the same Idempotency-Key."""
    names = own_names("o", 3)
    with (
        kv_sims(3, f"po-{backend}") as sims,
        placing_gateway(
            backend, fresh_db, sims, names, tmp_path, placement_probe_seconds=60
        ) as gateway,
    ):
        conversation = gateway.conversation(home=names[0])
        # A cold session's next-best after its home: the next replica in the order
        # configured (loads alike). Only the last one is left running.
        for sim in sims[:2]:
            sim.stop()
        keyed: Any = {"Idempotency-Key": f"once-{names[0]}"}
        with pytest.raises(openai.APIStatusError) as raised:
            gateway.turn(conversation, "hello", extra_headers=keyed)
        assert raised.value.status_code == 502
        assert served(sims[2], conversation.id) == 0
        assert not gateway.client.conversations.items.list(conversation.id).data
        placed = [metric("agentic_placements_total", replica=n, reason="home") for n in names]
        # The key's outcome is that refusal: its retry is answered with it and never
        # places the round again (no third replica for one Idempotency-Key).
        with pytest.raises(openai.APIStatusError) as again:
            gateway.turn(conversation, "hello", extra_headers=keyed)
        assert again.value.status_code == 502
        assert again.value.body == raised.value.body
        assert [metric("agentic_placements_total", replica=n, reason="home") for n in names] == (
            placed
        )
        assert metric("agentic_placements_total", replica=names[1], reason="failover") == 1
        assert served(sims[2], conversation.id) == 0


def test_a_replica_failing_health_is_ejected_by_the_probe(
    backend: str, fresh_db: str, tmp_path: Path
) -> None:
    """The probe finds the replica gone before any round does: it is ejected (its
    residency dropped), rounds go to the other without a failover, and the gateway stays
    ready and lists models through the replica left."""
    names = own_names("h", 2)
    with (
        kv_sims(2, f"ph-{backend}") as sims,
        placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway,
    ):
        gone, alive = sims
        conversation = gateway.conversation(home=names[0])
        gone.stop()
        eventually(
            lambda: (
                metric("agentic_replica_ejections_total", replica=names[0], cause="health") >= 1
            ),
            "the probe's ejection",
        )
        gateway.turn(conversation, "hello")
        assert served(alive, conversation.id) == 1
        [decision] = gateway.placements(conversation)
        assert (decision["replica"], decision["reason"]) == (names[1], "home")
        assert decision["home"] == names[1]
        assert metric("agentic_placements_total", replica=names[1], reason="failover") == 0
        ready = httpx.get(f"{gateway.server.url}/ready", timeout=10)
        assert ready.status_code == 200, ready.text
        assert [m.id for m in gateway.client.models.list().data] == ["sim-model"]


def test_the_turns_trace_says_where_each_round_went(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    with (
        recorded_spans() as spans,
        placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway,
    ):
        conversation = gateway.conversation(home=names[1])
        gateway.turn(conversation, words("task", 60))
        time.sleep(0.5)  # the first turn's KV events
        gateway.turn(conversation, "and then?")
        rounds = [s for s in spans.get_finished_spans() if s.name == "chat sim-model"]
    seen = [
        (
            (s.attributes or {}).get("agentic.placement.replica"),
            (s.attributes or {}).get("agentic.placement.reason"),
        )
        for s in rounds
    ]
    assert seen == [(names[1], "home"), (names[1], "resident_prefix")]
    last = rounds[-1].attributes or {}
    resident = last.get("agentic.placement.resident_tokens")
    assert isinstance(resident, int) and resident > 0
    assert last.get(f"agentic.placement.resident.{names[1]}") == resident
    assert last.get(f"agentic.placement.resident.{names[0]}") == 0


def test_a_prewarm_goes_where_the_next_turn_will_and_shows_with_its_parent(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    """A prewarm (a client's; keep-warm's re-warms take the same path) is placed by the
    same rule as the turn it warms, and the turn then finds it resident there."""
    with placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway:
        conversation = gateway.conversation(home=names[1])
        first = gateway.turn(conversation, words("task", 60))
        warmed: Any = {"prewarm": True}
        gateway.turn(conversation, "next?", prompt_cache_options=warmed)
        after = gateway.turn(conversation, "next?")
        assert served(sims[1], conversation.id) == 3
        assert served(sims[0], conversation.id) == 0
        assert after.usage is not None and after.usage.input_tokens_details.cached_tokens > 0
        shown = {t["id"]: t["placements"] for t in gateway.timeline(conversation)}
        assert [(p["purpose"], p["replica"]) for p in shown[first.id]] == [
            ("turn", names[1]),
            ("prewarm", names[1]),
        ]
        assert [(p["purpose"], p["replica"]) for p in shown[after.id]] == [("turn", names[1])]


def test_every_round_of_a_tool_loop_is_placed(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    """The gateway's MCP tool loop: each model round is placed (round 0, then 1, on the
    replica that just served the round before), and the turn's continuation follows."""
    mcp = start_mcp_server()
    tools: Any = [
        {"type": "mcp", "server_label": "tools", "server_url": mcp.url, "require_approval": "never"}
    ]
    try:
        with placing_gateway(
            backend, fresh_db, sims, names, tmp_path, mcp_allow_loopback=True
        ) as gateway:
            conversation = gateway.conversation(home=names[0])
            sims[0].push(
                ToolCalls([Call("tools__add", {"a": 2, "b": 3}, call_id="c1")]), Reply("It is 5.")
            )
            looped = gateway.turn(conversation, words("sum", 40), tools=tools)
            assert looped.status == "completed"
            gateway.turn(conversation, "thanks")
            assert served(sims[0], conversation.id) == 3
            assert served(sims[1], conversation.id) == 0
            decisions = gateway.placements(conversation)
            assert [(d["round"], d["replica"]) for d in decisions] == [
                (0, names[0]),
                (1, names[0]),
                (0, names[0]),
            ]
            assert decisions[-1]["reason"] == "resident_prefix"
    finally:
        mcp.stop()


def test_anthropic_messages_are_placed_by_their_session(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    """A Messages session (Claude Code's x-claude-code-session-id) goes to its home and
    its next message follows its last replica, streamed or not; none goes to the other."""
    with placing_gateway(backend, fresh_db, sims, names, tmp_path) as gateway:
        upstream_ids: dict[str, str] = {}
        for i in range(200):
            client_id = f"claude-{i}"
            upstream_id, _ = resolve_stateless_session(
                tenant_id=gateway.tenant.id, client_session_id=client_id
            )
            upstream_ids.setdefault(home_of(upstream_id, names), client_id)
            if len(upstream_ids) == 2:
                break
        for index, name in enumerate(names):
            client_id = upstream_ids[name]
            with anthropic.Anthropic(
                base_url=gateway.server.url,
                api_key=gateway.tenant.api_key,
                max_retries=0,
                timeout=20,
                default_headers={"x-claude-code-session-id": client_id},
            ) as claude:
                history: Any = [{"role": "user", "content": words(f"plan{index}-", 60)}]
                claude.messages.create(model="sim-model", max_tokens=16, messages=history)
                with claude.messages.stream(
                    model="sim-model", max_tokens=16, messages=history
                ) as stream:
                    stream.get_final_message()
            mine = sims[index].requests("/v1/messages")
            others = sims[1 - index].requests("/v1/messages")
            session = mine[-1].headers["x-session-id"]
            assert [r.headers["x-session-id"] for r in mine].count(session) == 2
            assert all(r.headers["x-session-id"] != session for r in others)
            # The first at its home; the second where the session's blocks are (its
            # KV events, labelled with its session) or, until they came, its last replica.
            assert metric("agentic_placements_total", replica=name, reason="home") >= 1
            placed = sum(
                metric("agentic_placements_total", replica=name, reason=reason)
                for reason in ("home", "resident_prefix")
            )
            assert placed == 2


def test_one_upstream_url_is_used_as_before(
    backend: str, fresh_db: str, sims: list[SimServer], tmp_path: Path
) -> None:
    """No named replicas: every round goes to upstream_base_url (a router places them),
    with llm-d's session-id header beside X-Session-ID; nothing is placed."""
    sim = sims[1]
    sim.reset()
    with app_server(backend, fresh_db, sim.url, tmp_path) as server:
        client = server.client(create_tenant(server.db_url), timeout=20)
        conversation = client.conversations.create()
        sim.push(Reply("hi"))
        client.responses.create(model="sim-model", conversation=conversation.id, input="hello")
        recorded = sim.last("/v1/responses")
        assert recorded.headers["x-session-id"] == conversation.id
        assert recorded.headers["session-id"] == conversation.id
        with anthropic.Anthropic(
            base_url=server.url, api_key=client.api_key, max_retries=0, timeout=20
        ) as claude:
            claude.messages.create(
                model="sim-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        message = sim.last("/v1/messages")
        assert message.headers["session-id"] == message.headers["x-session-id"]


def test_a_multi_agent_tree_is_placed_with_its_root(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    """Every agent of a multi-agent tree carries the root's session: the whole tree goes
    to the root's replica (its home, then where its prefix lives), round after round."""
    with placing_gateway(
        backend,
        fresh_db,
        sims,
        names,
        tmp_path,
        router_agentic_context=True,
        multi_agent_max_depth=1,
    ) as gateway:
        # Both simulators are scripted alike: the tree's rounds are answered wherever they go.
        for sim in sims:
            sim.push_for(
                "/root",
                ToolCalls(
                    [
                        Call("spawn_agent", {"task_name": "alpha", "message": "Find A."}),
                        Call("spawn_agent", {"task_name": "beta", "message": "Find B."}),
                    ]
                ),
                ToolCalls([Call("wait_agent", {})]),
                Reply("A is 1 and B is 2."),
            )
            sim.push_for("/root/alpha", Reply("A is 1."))
            sim.push_for("/root/beta", Reply("B is 2."))
        betas: Any = ["responses_multi_agent=v1"]
        # Homed on the replica that is not the first configured (where every round would
        # go if the tree's rounds were not placed).
        conversation = gateway.conversation(home=names[1])
        tree = gateway.client.beta.responses.create(
            model="sim-model",
            conversation=conversation.id,
            instructions="You lead a small team. Split the work, wait for it, then answer.",
            input=words("values", 40),
            multi_agent={"enabled": True, "max_concurrent_subagents": 2},
            betas=betas,
        )
        assert tree.status == "completed"
        rounds = [r for sim in sims for r in sim.requests("/v1/responses")]
        assert len(rounds) == 5  # the root's three, one each for alpha and beta
        assert {r.json["session_id"] for r in rounds} == {conversation.id}
        assert served(sims[1], conversation.id) == 5
        assert metric("agentic_placements_total", replica=names[1], reason="home") >= 1
        placed = sum(
            metric("agentic_placements_total", replica=name, reason=reason)
            for name in names
            for reason in ("home", "resident_prefix", "spill_load", "failover")
        )
        assert placed == 5
