"""The gateway's own placement over named replicas (``AGENTIC_UPSTREAM_REPLICAS``), on
SQLite and PostgreSQL: our server in front of two simulators, each publishing vLLM's KV
events from its own prefix cache. A session goes to its hashed home and stays with its
prefix; a saturated replica (its /metrics) spills a round and the prefix follows it; a
replica that refuses connections is ejected and the round fails over once; a replica's
emptied cache is never placed on; decisions show in the admin timeline and /metrics; one
upstream URL keeps sending to that URL."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.conversations import Conversation
from openai.types.responses import Response
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from agentic_api import tracing
from agentic_api.cache.placement import home_of
from tests.conftest import RunningServer, app_server
from tests.support.mcp_server import start_mcp_server
from tests.support.tenants import create_admin_key, create_tenant
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

BLOCK = 16


@contextmanager
def kv_sims(count: int, tag: str) -> Iterator[list[SimServer]]:
    folder = Path(tempfile.mkdtemp(prefix="pl-"))  # ipc:// paths must stay short
    sims: list[SimServer] = []
    try:
        for i in range(count):
            sims.append(
                SimServer(
                    block_size=BLOCK,
                    cache_capacity_blocks=400,
                    kv_events_endpoint=f"ipc://{folder}/{i}.ipc",
                    kv_events_topic=f"{tag}-{i}",
                ).start()
            )
        yield sims
    finally:
        for sim in sims:
            sim.stop()
        shutil.rmtree(folder, ignore_errors=True)


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


@contextmanager
def placing_server(
    backend: str,
    db_url: str,
    sims: list[SimServer],
    names: list[str],
    tmp: Path,
    **overrides: object,
) -> Iterator[RunningServer]:
    settings: dict[str, object] = {
        "upstream_replicas": {name: sim.url for name, sim in zip(names, sims, strict=True)},
        "kv_events_endpoints": {
            name: sim.config.kv_events_endpoint for name, sim in zip(names, sims, strict=True)
        },
        "placement_probe_seconds": 0.05,
        **overrides,
    }
    # upstream_base_url is not used with named replicas: point it nowhere.
    with app_server(backend, db_url, dead_url(), tmp, **settings) as running:
        yield running


def dead_url() -> str:
    """A loopback URL nothing listens on (a port bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def eventually(check: Callable[[], bool], what: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def homed_conversation(client: OpenAI, names: list[str], home: str) -> Conversation:
    """A new conversation (its id is the session) whose hashed home is ``home``."""
    for _ in range(200):
        conversation = client.conversations.create()
        if home_of(conversation.id, names) == home:
            return conversation
    raise AssertionError("no conversation homed there")


def turn(client: OpenAI, conversation: Conversation, text: str, **fields: Any) -> Response:
    created: Response = client.responses.create(
        model="sim-model", conversation=conversation.id, input=text, **fields
    )
    return created


def served(sim: SimServer, session_id: str) -> int:
    """Model calls of the session the simulator answered."""
    return sum(1 for r in sim.requests("/v1/responses") if r.json.get("session_id") == session_id)


@contextmanager
def admin_client(server: RunningServer) -> Iterator[httpx.Client]:
    key = create_admin_key(server.db_url)
    with httpx.Client(
        base_url=f"{server.url}/admin/v1", headers={"Authorization": f"Bearer {key}"}, timeout=20
    ) as http:
        yield http


def placements(admin: httpx.Client, tenant_id: str, conversation: Conversation) -> list[Any]:
    """The conversation's turns' placement decisions, oldest first (the admin timeline)."""
    page = admin.get(f"/tenants/{tenant_id}/conversations/{conversation.id}/timeline").json()
    return [p for t in page["data"] for p in t["placements"]]


def resident_on(admin: httpx.Client, response_id: str, replica: str) -> int:
    """Leading tokens of the response's prompt + output the replica holds (admin view)."""
    view = admin.get(f"/responses/{response_id}/residency").json()
    return sum(r["resident_tokens"] for r in view["replicas"] if r["replica"] == replica)


def wait_resident(admin: httpx.Client, response_id: str, replica: str) -> None:
    eventually(lambda: resident_on(admin, response_id, replica) > 0, f"{response_id} resident")


def test_each_session_goes_home_and_stays_with_its_prefix(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    with (
        placing_server(backend, fresh_db, sims, names, tmp_path) as server,
        admin_client(server) as admin,
    ):
        tenant = create_tenant(server.db_url)
        client = server.client(tenant, timeout=20)
        for index, name in enumerate(names):
            sim, other = sims[index], sims[1 - index]
            conversation = homed_conversation(client, names, name)
            # Prompts of their own: a prefix both shared would be resident on both.
            first = turn(client, conversation, words(f"task{index}-", 100))
            assert served(sim, conversation.id) == 1
            # The replica's events show the turn's prompt + output resident there.
            wait_resident(admin, first.id, name)
            second = turn(client, conversation, "and then?")
            third = turn(client, conversation, "and after that?")
            assert served(sim, conversation.id) == 3
            assert served(other, conversation.id) == 0
            assert second.usage is not None and third.usage is not None
            assert second.usage.input_tokens_details.cached_tokens > 0
            assert third.usage.input_tokens_details.cached_tokens > 0
            decisions = placements(admin, tenant.id, conversation)
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
        exposition = httpx.get(f"{server.url}/metrics").text
        assert f'agentic_placements_total{{reason="home",replica="{names[0]}"}} 1.0' in exposition


def test_a_saturated_replica_spills_and_the_prefix_follows(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    home, away = sims
    with (
        placing_server(backend, fresh_db, sims, names, tmp_path) as server,
        admin_client(server) as admin,
    ):
        tenant = create_tenant(server.db_url)
        client = server.client(tenant, timeout=20)
        conversation = homed_conversation(client, names, names[0])
        turn(client, conversation, words("task", 100))
        # The home is saturated now (requests waiting past the limit) and the probe sees it.
        home.state.load = (9.0, 0.5)
        time.sleep(0.3)
        spilled = turn(client, conversation, "next step")
        assert (served(home, conversation.id), served(away, conversation.id)) == (1, 1)
        home.state.load = (0.0, 0.1)
        time.sleep(0.3)
        # The spilled turn's prompt + output are the longest prefix now: it stays there.
        wait_resident(admin, spilled.id, names[1])
        last = turn(client, conversation, "and the last one")
        assert (served(home, conversation.id), served(away, conversation.id)) == (1, 2)
        assert last.usage is not None and last.usage.input_tokens_details.cached_tokens > 0
        decisions = placements(admin, tenant.id, conversation)
        assert [(d["replica"], d["reason"]) for d in decisions] == [
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
    sim = sims[0]
    with (
        placing_server(backend, fresh_db, sims, names, tmp_path) as server,
        admin_client(server) as admin,
    ):
        tenant = create_tenant(server.db_url)
        client = server.client(tenant, timeout=20)
        conversation = homed_conversation(client, names, names[0])
        first = turn(client, conversation, words("task", 100))

        wait_resident(admin, first.id, names[0])
        httpx.post(f"{sim.url}/_sim/reset_prefix_cache")
        eventually(lambda: resident_on(admin, first.id, names[0]) == 0, "the cleared cache seen")
        # Past the event lag: the previous round's replica is no longer presumed to hold it.
        time.sleep(server.settings.placement_event_lag_seconds)
        second = turn(client, conversation, "and then?")
        assert second.usage is not None
        assert second.usage.input_tokens_details.cached_tokens == 0
        decision = placements(admin, tenant.id, conversation)[-1]
        assert (decision["replica"], decision["reason"]) == (names[0], "home")
        assert all(c["resident_tokens"] == 0 for c in decision["candidates"])


def test_a_refused_round_fails_over_once_and_the_replica_is_ejected(
    backend: str, fresh_db: str, tmp_path: Path
) -> None:
    stamp = time.monotonic_ns()
    names = [f"f0-{stamp}", f"f1-{stamp}"]
    # A slow probe: the round, not the probe, finds the replica gone.
    with (
        kv_sims(2, f"pf-{backend}") as (gone, alive),
        placing_server(
            backend, fresh_db, [gone, alive], names, tmp_path, placement_probe_seconds=60
        ) as server,
        admin_client(server) as admin,
    ):
        tenant = create_tenant(server.db_url)
        client = server.client(tenant, timeout=20)
        conversation = homed_conversation(client, names, names[0])
        gone.stop()
        first = turn(client, conversation, words("task", 50))
        assert first.status == "completed"
        assert served(alive, conversation.id) == 1
        assert metric("agentic_replica_ejections_total", replica=names[0], cause="refused") == 1
        # Ejected: the next round goes straight to the other replica.
        turn(client, conversation, "again")
        assert served(alive, conversation.id) == 2
        decisions = placements(admin, tenant.id, conversation)
        assert [(d["replica"], d["reason"]) for d in decisions] == [
            (names[0], "home"),
            (names[1], "failover"),
            (names[1], "resident_prefix"),
        ]
        assert [d["round"] for d in decisions] == [0, 0, 0]
        assert metric("agentic_placements_total", replica=names[1], reason="failover") == 1


def test_a_round_fails_over_at_most_once(backend: str, fresh_db: str, tmp_path: Path) -> None:
    """Two of three replicas refuse: the round tries its first choice and one other, then
    the client gets the refusal; nothing is stored, the third replica never sees it."""
    stamp = time.monotonic_ns()
    names = [f"o0-{stamp}", f"o1-{stamp}", f"o2-{stamp}"]
    with (
        kv_sims(3, f"po-{backend}") as sims,
        placing_server(
            backend, fresh_db, sims, names, tmp_path, placement_probe_seconds=60
        ) as server,
    ):
        tenant = create_tenant(server.db_url)
        client = server.client(tenant, timeout=20)
        conversation = homed_conversation(client, names, names[0])
        # A cold session's next-best after its home: the next replica in the order
        # configured (loads alike). Only the last one is left running.
        kept = 2
        for sim in sims[:kept]:
            sim.stop()
        with pytest.raises(openai.APIStatusError) as raised:
            turn(client, conversation, "hello")
        assert raised.value.status_code == 502
        assert served(sims[kept], conversation.id) == 0
        assert not client.conversations.items.list(conversation.id).data


def test_one_upstream_url_is_used_as_before(
    backend: str, fresh_db: str, sims: list[SimServer], names: list[str], tmp_path: Path
) -> None:
    """No named replicas: every round goes to upstream_base_url (a router places them),
    with llm-d's session-id header beside X-Session-ID; nothing is placed."""
    sim = sims[1]
    with app_server(backend, fresh_db, sim.url, tmp_path) as server:
        client = server.client(create_tenant(server.db_url), timeout=20)
        conversation = client.conversations.create()
        sim.push(Reply("hi"))
        turn(client, conversation, "hello")
        recorded = sim.last("/v1/responses")
        assert recorded.headers["x-session-id"] == conversation.id
        assert recorded.headers["session-id"] == conversation.id


def test_a_replica_failing_health_is_ejected_by_the_probe(
    backend: str, fresh_db: str, tmp_path: Path
) -> None:
    """The probe finds the replica gone before any round does: it is ejected (its
    residency dropped), rounds go to the other without a failover, and the gateway stays
    ready and lists models through the replica left."""
    stamp = time.monotonic_ns()
    names = [f"h0-{stamp}", f"h1-{stamp}"]
    with (
        kv_sims(2, f"ph-{backend}") as (gone, alive),
        placing_server(backend, fresh_db, [gone, alive], names, tmp_path) as server,
        admin_client(server) as admin,
    ):
        tenant = create_tenant(server.db_url)
        client = server.client(tenant, timeout=20)
        conversation = homed_conversation(client, names, names[0])
        gone.stop()
        eventually(
            lambda: (
                metric("agentic_replica_ejections_total", replica=names[0], cause="health") >= 1
            ),
            "the probe's ejection",
        )
        turn(client, conversation, "hello")
        assert served(alive, conversation.id) == 1
        [decision] = placements(admin, tenant.id, conversation)
        assert (decision["replica"], decision["reason"]) == (names[1], "home")
        assert decision["home"] == names[1]
        assert metric("agentic_placements_total", replica=names[1], reason="failover") == 0
        ready = httpx.get(f"{server.url}/ready", timeout=10)
        assert ready.status_code == 200, ready.text
        assert [m.id for m in client.models.list().data] == ["sim-model"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.uninstall()


def test_the_turns_trace_says_where_each_round_went(
    backend: str,
    fresh_db: str,
    sims: list[SimServer],
    names: list[str],
    tmp_path: Path,
    spans: InMemorySpanExporter,
) -> None:
    with placing_server(backend, fresh_db, sims, names, tmp_path) as server:
        client = server.client(create_tenant(server.db_url), timeout=20)
        conversation = homed_conversation(client, names, names[1])
        turn(client, conversation, words("task", 60))
        time.sleep(0.5)  # the first turn's KV events
        turn(client, conversation, "and then?")
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
    with (
        placing_server(backend, fresh_db, sims, names, tmp_path) as server,
        admin_client(server) as admin,
    ):
        tenant = create_tenant(server.db_url)
        client = server.client(tenant, timeout=20)
        conversation = homed_conversation(client, names, names[1])
        first = turn(client, conversation, words("task", 60))
        warmed: Any = {"prewarm": True}
        turn(client, conversation, "next?", prompt_cache_options=warmed)
        after = turn(client, conversation, "next?")
        assert served(sims[1], conversation.id) == 3
        assert served(sims[0], conversation.id) == 0
        assert after.usage is not None and after.usage.input_tokens_details.cached_tokens > 0
        page = admin.get(f"/tenants/{tenant.id}/conversations/{conversation.id}/timeline")
        shown = {t["id"]: t["placements"] for t in page.json()["data"]}
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
        {
            "type": "mcp",
            "server_label": "tools",
            "server_url": mcp.url,
            "require_approval": "never",
        }
    ]
    try:
        with (
            placing_server(
                backend, fresh_db, sims, names, tmp_path, mcp_allow_loopback=True
            ) as server,
            admin_client(server) as admin,
        ):
            tenant = create_tenant(server.db_url)
            client = server.client(tenant, timeout=20)
            conversation = homed_conversation(client, names, names[0])
            sims[0].push(
                ToolCalls([Call("tools__add", {"a": 2, "b": 3}, call_id="c1")]), Reply("It is 5.")
            )
            looped = turn(client, conversation, words("sum", 40), tools=tools)
            assert looped.status == "completed"
            turn(client, conversation, "thanks")
            assert served(sims[0], conversation.id) == 3
            assert served(sims[1], conversation.id) == 0
            decisions = placements(admin, tenant.id, conversation)
            assert [(d["round"], d["replica"]) for d in decisions] == [
                (0, names[0]),
                (1, names[0]),
                (0, names[0]),
            ]
            assert decisions[-1]["reason"] == "resident_prefix"
    finally:
        mcp.stop()
