"""Keep paused agents warm (``AGENTIC_KEEP_WARM_ENABLED``), on SQLite and PostgreSQL: our
server subscribed to a simulator that publishes vLLM's KV events from a small prefix cache.
An agent pauses in a function call; another tenant's traffic evicts its prefix; the
keep-warm loop re-warms it through the prewarm path (same session and routing fields as
the next turn, one output token, nothing stored); the agent's return then hits. And the
bounds: budgets (per tenant, global), the TTL, the replica's pressure (its /metrics), and
cancellation when the agent comes back first. Each server is the test's own (its bounds
differ), on a database of its own."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types.responses import Response

from tests.conftest import RunningServer, app_server
from tests.support.tenants import create_admin_key, create_tenant
from tests.support.waiting import eventually, metric
from tests.upstream_sim import Call, Hang, Reply, SimServer, ToolCalls
from tests.upstream_sim.state import RecordedRequest

BLOCK = 16
CAPACITY_BLOCKS = 40
TOOLS: Any = [
    {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "strict": False,
    }
]


@contextmanager
def kv_simulator(topic: str, capacity_blocks: int) -> Iterator[SimServer]:
    """A simulator publishing vLLM's KV events from a prefix cache of ``capacity_blocks``."""
    folder = Path(tempfile.mkdtemp(prefix="kw-"))  # ipc:// paths must stay short
    try:
        with SimServer(
            block_size=BLOCK,
            cache_capacity_blocks=capacity_blocks,
            kv_events_endpoint=f"ipc://{folder}/sim.ipc",
            kv_events_topic=topic,
        ) as server:
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def kv_sim(backend: str) -> Iterator[SimServer]:
    with kv_simulator(f"kw-{backend}", CAPACITY_BLOCKS) as server:
        yield server


@pytest.fixture
def replica(kv_sim: SimServer, backend: str) -> str:
    kv_sim.reset()  # an empty cache and script: this test's traffic decides what goes
    # Prometheus series live in this process: one replica name per test keeps them apart.
    return f"kw-{backend}-{time.monotonic_ns()}"


@contextmanager
def keep_warm_server(
    backend: str, db_url: str, sim: SimServer, replica: str, tmp: Path, **overrides: object
) -> Iterator[RunningServer]:
    settings: dict[str, object] = {
        "kv_events_endpoints": {replica: sim.config.kv_events_endpoint},
        "keep_warm_enabled": True,
        "keep_warm_interval_seconds": 0.05,
        # These tests follow each re-warm as soon as its eviction is seen; the default
        # (before_return) waits for a session's expected return after its first pause.
        "keep_warm_when": "evicted",
        **overrides,
    }
    with app_server(backend, db_url, sim.url, tmp, **settings) as running:
        yield running


Serve = Callable[..., AbstractContextManager[tuple[RunningServer, httpx.Client]]]


@pytest.fixture
def serve(backend: str, fresh_db: str, kv_sim: SimServer, replica: str, tmp_path: Path) -> Serve:
    """Starts this test's keep-warm server (``keep_warm_server``, with overrides of its
    settings) on its own database, with an admin client of it."""

    @contextmanager
    def start(**overrides: object) -> Iterator[tuple[RunningServer, httpx.Client]]:
        with (
            keep_warm_server(backend, fresh_db, kv_sim, replica, tmp_path, **overrides) as server,
            admin_client(server) as admin,
        ):
            yield server, admin

    return start


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def rewarms(sim: SimServer, session_id: str) -> list[RecordedRequest]:
    return [
        r
        for r in sim.requests("/v1/responses")
        if r.json.get("max_output_tokens") == 1 and r.json.get("session_id") == session_id
    ]


class Agent:
    """One agent's session: a turn that pauses in a function call, then its return."""

    def __init__(self, client: OpenAI, sim: SimServer) -> None:
        self.client, self.sim = client, sim

    def pause(self) -> Response:
        self.sim.push(ToolCalls([Call("lookup", {"q": "weather"}, call_id="call_kw")]))
        paused = self.client.responses.create(
            model="sim-model", input=words("task", 120), tools=TOOLS
        )
        assert paused.output[-1].type == "function_call"
        self.paused = paused
        self.session_id = self.sim.last("/v1/responses").json["session_id"]
        return paused

    def come_back(self) -> Response:
        self.sim.push(Reply("done with the weather"))
        back: Response = self.client.responses.create(
            model="sim-model",
            input=[{"type": "function_call_output", "call_id": "call_kw", "output": "sunny"}],
            previous_response_id=self.paused.id,
            tools=TOOLS,
        )
        return back


def resident(admin: httpx.Client, response_id: str, replica: str) -> int:
    view = admin.get(f"/responses/{response_id}/residency").json()
    return sum(r["resident_tokens"] for r in view["replicas"] if r["replica"] == replica)


def evict(server: RunningServer, sim: SimServer, *behaviors: Any) -> None:
    """Another tenant's long prompt: more than the cache holds, so the paused prefix goes."""
    sim.push(*behaviors)
    other = server.client(create_tenant(server.db_url), timeout=20)
    other.responses.create(model="sim-model", input=words("busy", 300))


@contextmanager
def admin_client(server: RunningServer) -> Iterator[httpx.Client]:
    key = create_admin_key(server.db_url)
    with httpx.Client(
        base_url=f"{server.url}/admin/v1", headers={"Authorization": f"Bearer {key}"}, timeout=20
    ) as http:
        yield http


def paused_and_seen(agent: Agent, admin: httpx.Client, replica: str) -> Response:
    paused = agent.pause()
    # 30 s: the KV events come from another process, which a loaded 2-core machine (the
    # real-vLLM tier beside this one) once kept from reporting within 15 s.
    eventually(
        lambda: resident(admin, paused.id, replica) > 0, "the paused prefix resident", seconds=30
    )
    time.sleep(0.3)  # a few of the loop's ticks: it has seen the prefix resident
    return paused


def full_blocks(tokens: int) -> int:
    return tokens // BLOCK * BLOCK


def new_agent(server: RunningServer, sim: SimServer) -> Agent:
    """An agent of a tenant of its own."""
    return Agent(server.client(create_tenant(server.db_url), timeout=20), sim)


def assert_came_back_warm(back: Response, paused: Response) -> int:
    """The return found every full block of the paused turn's prompt cached; how many
    tokens it found cached."""
    assert back.usage is not None and paused.usage is not None
    cached = back.usage.input_tokens_details.cached_tokens
    assert cached >= full_blocks(paused.usage.input_tokens)
    return cached


def test_an_evicted_paused_agent_is_rewarmed_and_comes_back_warm(
    kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    paid_before = metric("agentic_keep_warm_rewarms_total", outcome="paid_off")
    tokens_before = metric("agentic_keep_warm_tokens_total")
    with serve(keep_warm_replica_metrics={replica: f"{kv_sim.url}/metrics"}) as (server, admin):
        tenant = create_tenant(server.db_url)
        agent = Agent(server.client(tenant, timeout=20), kv_sim)
        paused = paused_and_seen(agent, admin, replica)
        turn = kv_sim.last("/v1/responses")
        evict(server, kv_sim)
        eventually(lambda: bool(rewarms(kv_sim, agent.session_id)), "a re-warm")
        (sent,) = rewarms(kv_sim, agent.session_id)
        # The next turn's routing coordinates: its session header and body fields, salt.
        assert sent.headers["x-session-id"] == turn.headers["x-session-id"]
        assert sent.json["cache_salt"] == turn.json["cache_salt"]
        assert sent.json["tools"] == turn.json["tools"]
        assert sent.json["input"][: len(turn.json["input"])] == turn.json["input"]
        eventually(lambda: resident(admin, paused.id, replica) > 0, "the prefix back")

        back = agent.come_back()
        cached = assert_came_back_warm(back, paused)
        lineage = admin.get(f"/responses/{back.id}/lineage").json()
        first, second = lineage["ancestors"]
        (record,) = first["rewarms"]
        assert record["outcome"] == "paid_off" and record["replica"] == replica
        assert record["reason"] == "evicted while paused"
        assert record["pressure_checked"] is True
        assert record["spent_tokens"] > 0
        assert record["next_cached_tokens"] == cached
        assert second["rewarms"] == []
        # Nothing of the re-warm was stored: the tenant has its two turns.
        assert [turn["id"] for turn in lineage["ancestors"]] == [paused.id, back.id]
    assert metric("agentic_keep_warm_rewarms_total", outcome="paid_off") == paid_before + 1
    assert metric("agentic_keep_warm_tokens_total") == tokens_before + record["spent_tokens"]


def test_without_keep_warm_the_same_return_is_cold(
    kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    # The control of the test above.
    with serve(keep_warm_enabled=False) as (server, admin):
        agent = new_agent(server, kv_sim)
        paused = paused_and_seen(agent, admin, replica)
        evict(server, kv_sim)
        eventually(lambda: resident(admin, paused.id, replica) == 0, "the prefix evicted")
        time.sleep(0.3)
        back = agent.come_back()
        assert rewarms(kv_sim, agent.session_id) == []
    assert back.usage is not None and paused.usage is not None
    assert back.usage.input_tokens_details.cached_tokens < full_blocks(paused.usage.input_tokens)


@pytest.mark.parametrize(
    ("bounds", "reason"),
    [
        ({"keep_warm_tenant_tokens_per_minute": 50}, "tenant_budget"),
        ({"keep_warm_tokens_per_minute": 50}, "budget"),
    ],
)
def test_a_rewarm_past_a_budget_is_not_sent(
    bounds: dict[str, int], reason: str, kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    skipped_before = metric("agentic_keep_warm_skipped_total", reason=reason)
    with serve(**bounds) as (server, admin):
        agent = new_agent(server, kv_sim)
        paused = paused_and_seen(agent, admin, replica)
        evict(server, kv_sim)
        eventually(
            lambda: metric("agentic_keep_warm_skipped_total", reason=reason) > skipped_before,
            f"a skip for {reason}",
        )
        time.sleep(0.3)
        assert rewarms(kv_sim, agent.session_id) == []
        assert resident(admin, paused.id, replica) == 0
    # Counted once per pause, however many ticks saw it over budget.
    assert metric("agentic_keep_warm_skipped_total", reason=reason) == skipped_before + 1


def test_a_session_paused_past_the_ttl_is_forgotten(
    kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    ttl_before = metric("agentic_keep_warm_skipped_total", reason="ttl")
    with serve(keep_warm_ttl_seconds=0.5) as (server, admin):
        agent = new_agent(server, kv_sim)
        paused_and_seen(agent, admin, replica)
        eventually(
            lambda: metric("agentic_keep_warm_skipped_total", reason="ttl") > ttl_before,
            "the pause forgotten",
        )
        evict(server, kv_sim)
        time.sleep(0.5)
        assert rewarms(kv_sim, agent.session_id) == []


@pytest.mark.parametrize("named", [False, True], ids=["metrics_url", "named_replica"])
def test_no_rewarm_while_the_replica_is_under_pressure(
    kv_sim: SimServer, replica: str, named: bool, serve: Serve
) -> None:
    pressure_before = metric("agentic_keep_warm_skipped_total", reason="pressure")
    # Its /metrics URL given for keep-warm, or found from the named replica the gateway
    # places on (AGENTIC_UPSTREAM_REPLICAS: the same server).
    where: dict[str, object] = (
        {"upstream_replicas": {replica: kv_sim.url}}
        if named
        else {"keep_warm_replica_metrics": {replica: f"{kv_sim.url}/metrics"}}
    )
    with serve(**where) as (server, admin):
        agent = new_agent(server, kv_sim)
        paused_and_seen(agent, admin, replica)
        kv_sim.state.load = (2.0, 0.3)  # two requests waiting for the scheduler
        evict(server, kv_sim)
        eventually(
            lambda: metric("agentic_keep_warm_skipped_total", reason="pressure") > pressure_before,
            "a skip for pressure",
        )
        time.sleep(0.3)
        assert rewarms(kv_sim, agent.session_id) == []
        kv_sim.state.load = (0.0, 0.95)  # running requests hold most of the cache
        time.sleep(0.3)
        assert rewarms(kv_sim, agent.session_id) == []
        kv_sim.state.load = (0.0, 0.2)  # the pressure is gone: it goes now
        eventually(lambda: bool(rewarms(kv_sim, agent.session_id)), "the re-warm")


def test_a_rewarm_in_flight_is_cancelled_when_the_agent_comes_back(
    kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    cancelled_before = metric("agentic_keep_warm_rewarms_total", outcome="cancelled")
    with serve() as (server, admin):
        agent = new_agent(server, kv_sim)
        paused_and_seen(agent, admin, replica)
        # The other tenant's turn answers; the re-warm after it hangs in the "engine".
        evict(server, kv_sim, Reply("busy"), Hang())
        eventually(lambda: bool(rewarms(kv_sim, agent.session_id)), "a re-warm sent")
        back = agent.come_back()
        assert back.status == "completed"
        eventually(lambda: len(kv_sim.aborted) == 1, "the re-warm aborted upstream")
        (aborted,) = kv_sim.aborted
        assert aborted.json.get("max_output_tokens") == 1
        first = admin.get(f"/responses/{back.id}/lineage").json()["ancestors"][0]
        (record,) = first["rewarms"]
        assert record["outcome"] == "cancelled" and record["spent_tokens"] == 0
    assert metric("agentic_keep_warm_rewarms_total", outcome="cancelled") == cancelled_before + 1


@pytest.mark.parametrize(
    ("pause_on", "rewarmed"), [("function_call", False), ("tools_offered", True)]
)
def test_a_text_answer_pauses_only_when_offering_tools_is_the_rule(
    pause_on: str, rewarmed: bool, kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    with serve(keep_warm_pause_on=pause_on) as (server, admin):
        client = server.client(create_tenant(server.db_url), timeout=20)
        kv_sim.push(Reply("I will look that up."))
        answered = client.responses.create(model="sim-model", input=words("task", 120), tools=TOOLS)
        session_id = kv_sim.last("/v1/responses").json["session_id"]
        eventually(lambda: resident(admin, answered.id, replica) > 0, "the prefix resident")
        time.sleep(0.3)
        evict(server, kv_sim)
        if rewarmed:
            eventually(lambda: bool(rewarms(kv_sim, session_id)), "a re-warm")
        else:
            eventually(lambda: resident(admin, answered.id, replica) == 0, "the prefix evicted")
            time.sleep(0.3)
            assert rewarms(kv_sim, session_id) == []


@pytest.mark.parametrize("cap", [1, 2])
def test_rewarms_per_pause_are_capped(
    cap: int, kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    with serve(keep_warm_max_rewarms_per_pause=cap) as (server, admin):
        agent = new_agent(server, kv_sim)
        paused = paused_and_seen(agent, admin, replica)
        evict(server, kv_sim)
        eventually(lambda: len(rewarms(kv_sim, agent.session_id)) == 1, "a first re-warm")
        eventually(lambda: resident(admin, paused.id, replica) > 0, "the prefix back")
        time.sleep(0.3)
        evict(server, kv_sim)  # evicted again while still paused
        if cap == 1:
            eventually(lambda: resident(admin, paused.id, replica) == 0, "evicted again")
            time.sleep(0.5)
            assert len(rewarms(kv_sim, agent.session_id)) == 1
        else:
            eventually(lambda: len(rewarms(kv_sim, agent.session_id)) == 2, "a second re-warm")
        agent.come_back()
        records = admin.get(f"/responses/{paused.id}/lineage").json()["ancestors"][0]["rewarms"]
        # The first re-warm's blocks went before the agent came back: it did not pay off.
        assert records[0]["outcome"] == "wasted"
        assert len(records) == cap


def test_a_disabled_tenant_gets_no_rewarm_and_a_rotated_salt_warms_the_new_one(
    kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    """The loop acts for a tenant with no request to authenticate: it reads the tenant as
    it is at the re-warm, not as it was at the pause."""
    with serve() as (server, admin):
        rotated = create_tenant(server.db_url)
        agent = Agent(server.client(rotated, timeout=20), kv_sim)
        paused_and_seen(agent, admin, replica)
        old_salt = kv_sim.last("/v1/responses").json["cache_salt"]
        assert admin.post(f"/tenants/{rotated.id}/rotate_salt").status_code == 200
        evict(server, kv_sim)
        eventually(lambda: bool(rewarms(kv_sim, agent.session_id)), "a re-warm")
        (sent,) = rewarms(kv_sim, agent.session_id)
        assert sent.json["cache_salt"] != old_salt

        disabled = create_tenant(server.db_url)
        other = Agent(server.client(disabled, timeout=20), kv_sim)
        paused_and_seen(other, admin, replica)
        assert admin.post(f"/tenants/{disabled.id}/disable").status_code == 200
        evict(server, kv_sim)
        time.sleep(1.0)  # twenty of the loop's ticks
        assert rewarms(kv_sim, other.session_id) == []


def pause_again(agent: Agent) -> Response:
    """The agent's return that pauses again in another function call."""
    agent.sim.push(ToolCalls([Call("lookup", {"q": "tides"}, call_id="call_kw2")]))
    again: Response = agent.client.responses.create(
        model="sim-model",
        input=[{"type": "function_call_output", "call_id": "call_kw", "output": "sunny"}],
        previous_response_id=agent.paused.id,
        tools=TOOLS,
    )
    assert again.output[-1].type == "function_call"
    agent.paused = again
    return again


TOOL_SECONDS = 3.0
LEAD_SECONDS = 1.0


@pytest.mark.parametrize(
    ("bounds", "skipped"),
    [({}, None), ({"keep_warm_tenant_tokens_per_minute": 50}, "tenant_budget")],
)
def test_before_return_an_early_eviction_is_rewarmed_shortly_before_the_agent_is_back(
    bounds: dict[str, int], skipped: str | None, kv_sim: SimServer, replica: str, serve: Serve
) -> None:
    """``AGENTIC_KEEP_WARM_WHEN=before_return``: the session's first tool call took
    TOOL_SECONDS, so in its second pause it is expected back TOOL_SECONDS after pausing;
    its prefix, evicted at once, is re-warmed LEAD_SECONDS before that, not when it went
    (and the bounds still apply then)."""
    skipped_before = metric("agentic_keep_warm_skipped_total", reason=skipped or "budget")
    with serve(keep_warm_when="before_return", keep_warm_lead_seconds=LEAD_SECONDS, **bounds) as (
        server,
        admin,
    ):
        agent = new_agent(server, kv_sim)
        agent.pause()
        time.sleep(TOOL_SECONDS)  # the first tool call: the session's pause length
        sent_again = time.time()
        paused = pause_again(agent)
        eventually(lambda: resident(admin, paused.id, replica) > 0, "the paused prefix resident")
        time.sleep(0.3)
        evict(server, kv_sim)
        eventually(lambda: resident(admin, paused.id, replica) == 0, "the prefix evicted")
        # Evicted early in the pause: nothing sent yet (an eviction-time re-warm would be).
        assert rewarms(kv_sim, agent.session_id) == []
        if skipped is not None:
            eventually(
                lambda: metric("agentic_keep_warm_skipped_total", reason=skipped) > skipped_before,
                f"a skip for {skipped} once the re-warm was due",
            )
            assert time.time() >= sent_again + TOOL_SECONDS - LEAD_SECONDS
            assert rewarms(kv_sim, agent.session_id) == []
            return
        eventually(lambda: bool(rewarms(kv_sim, agent.session_id)), "the re-warm before return")
        eventually(lambda: resident(admin, paused.id, replica) > 0, "the prefix back")
        agent.sim.push(Reply("done with the tides"))
        back = agent.client.responses.create(
            model="sim-model",
            input=[{"type": "function_call_output", "call_id": "call_kw2", "output": "high"}],
            previous_response_id=paused.id,
            tools=TOOLS,
        )
        assert_came_back_warm(back, paused)
        ancestors = admin.get(f"/responses/{back.id}/lineage").json()["ancestors"]
        (record,) = ancestors[1]["rewarms"]
        assert ancestors[0]["rewarms"] == []  # the first pause was never evicted
        assert record["outcome"] == "paid_off"
        assert record["reason"] == "evicted while paused; re-warmed ahead of its expected return"
        # Expected back one first-pause length (at least TOOL_SECONDS) after it paused, and
        # sent no earlier than LEAD_SECONDS before that.
        assert record["expected_return_at"] >= sent_again + TOOL_SECONDS
        assert record["at"] >= record["expected_return_at"] - LEAD_SECONDS


@pytest.mark.parametrize("token_artifacts", ["auto", "off"])
def test_an_emptied_cache_is_rewarmed_like_an_eviction(
    kv_sim: SimServer, replica: str, token_artifacts: str, serve: Serve
) -> None:
    # vLLM 0.34's /checkpoint/prepare (or a prefix-cache reset) empties the cache: one
    # AllBlocksCleared, no block named. With token ids the paused prefix is seen gone; without
    # them no eviction names the session, and the emptied cache alone must count.
    cleared = metric("agentic_kv_coverage_resets_total", replica=replica, reason="cleared")
    with serve(token_artifacts=token_artifacts) as (server, admin):
        agent = new_agent(server, kv_sim)
        paused = paused_and_seen(agent, admin, replica)
        assert httpx.post(f"{kv_sim.url}/checkpoint/prepare", timeout=10).status_code == 200
        eventually(lambda: bool(rewarms(kv_sim, agent.session_id)), "a re-warm")
        assert (
            metric("agentic_kv_coverage_resets_total", replica=replica, reason="cleared")
            == cleared + 1
        )
        eventually(lambda: resident(admin, paused.id, replica) > 0, "the prefix back")
        back = agent.come_back()
        assert_came_back_warm(back, paused)
        first, _ = admin.get(f"/responses/{back.id}/lineage").json()["ancestors"]
        (record,) = first["rewarms"]
        assert record["reason"] == "the replica's cache was emptied while paused"
        assert record["outcome"] == "paid_off" and record["replica"] == replica
