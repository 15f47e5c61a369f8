"""KV residency against two real vLLM replicas (CPU, tiny random Llama, a 2,048-token KV
cache each, KV events on ipc:// endpoints): our servers, one in front of each replica,
both subscribed to both replicas' events.

- the events arrive labeled with our session (the conversation id) and the tenant's salt;
- a continuation that hits is resident on the replica that served it, and only there;
- a paused session evicted by other traffic has the eviction recorded (with its idle
  time) and its next turn's miss attributed to it in the timeline;
- through vllm-router (which drops X-Session-ID) the body session_id still labels them;
- a replica restart clears that replica's coverage, and it is followed again after.

The module starts (and stops) its own two replicas; it runs before test_real_vllm.py
(whose vLLM is session-wide), so no more than two run at once. It runs on PostgreSQL only
(see ``kv_db_url`` in conftest.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from prometheus_client import REGISTRY

from tests.conftest import RunningServer, app_server
from tests.real_vllm.conftest import BLOCK_SIZE
from tests.support.servers import free_port
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant

pytestmark = pytest.mark.real_vllm

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "real_vllm"
BLOCK = BLOCK_SIZE
KV_CACHE_BYTES = 2 * 1024 * 1024  # 2,048 tokens of the tiny model (1 KiB per token)


@dataclass
class Replica:
    name: str
    port: int
    endpoint: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        config = (
            '{"enable_kv_cache_events":true,"publisher":"zmq",'
            f'"endpoint":"{self.endpoint}","topic":"{self.name}"}}'
        )
        env = {**os.environ, "AGENTIC_VLLM_KVCACHE_GB": "none"}
        subprocess.run(
            [
                str(SCRIPTS / "start.sh"),
                str(self.port),
                "tiny-llama",
                "--max-model-len",
                "1024",
                "--kv-cache-memory-bytes",
                str(KV_CACHE_BYTES),
                "--kv-events-config",
                config,
            ],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        subprocess.run([str(SCRIPTS / "stop.sh"), str(self.port)], check=False)


@pytest.fixture(scope="module")
def replicas() -> Iterator[dict[str, Replica]]:
    subprocess.run([str(SCRIPTS / "setup.sh")], check=True, stdout=subprocess.DEVNULL)
    folder = Path(tempfile.mkdtemp(prefix="kvr-"))
    found = {
        name: Replica(name, free_port(), f"ipc://{folder}/{name}.ipc")
        for name in ("replica-a", "replica-b")
    }
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(Replica.start, found.values()))
        yield found
    finally:
        for replica in found.values():
            replica.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def servers(
    kv_db_url: str, replicas: dict[str, Replica], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, RunningServer]]:
    backend, db_url = "postgres", kv_db_url
    endpoints = {r.name: r.endpoint for r in replicas.values()}
    data = tmp_path_factory.mktemp("kv-real")
    a, b = replicas["replica-a"], replicas["replica-b"]
    with (
        app_server(backend, db_url, a.url, data, kv_events_endpoints=endpoints) as in_front_of_a,
        app_server(backend, db_url, b.url, data, kv_events_endpoints=endpoints) as in_front_of_b,
    ):
        yield {a.name: in_front_of_a, b.name: in_front_of_b}


@pytest.fixture(scope="module")
def tenant(servers: dict[str, RunningServer]) -> TenantKeys:
    return create_tenant(servers["replica-a"].db_url)


def admin_of(server: RunningServer) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/admin/v1",
        headers={"Authorization": f"Bearer {create_admin_key(server.db_url)}"},
        timeout=30,
    )


def text(tag: str, words: int) -> str:
    # ~3.5 tokens a word; the tag up front keeps each test's prefix its own.
    return tag + " " + " ".join(f"alpha{i % 89}" for i in range(words))


def ask(client: OpenAI, conversation: str, words: str) -> Any:
    return client.responses.create(
        model="tiny-llama",
        input=words,
        conversation=conversation,
        temperature=0,
        max_output_tokens=4,
    )


def residency(admin: httpx.Client, conversation: str) -> dict[str, dict[str, Any]]:
    answer = admin.get(f"/conversations/{conversation}/residency")
    assert answer.status_code == 200, answer.text
    return {r["replica"]: r for r in answer.json()["replicas"]}


def wait_for(
    read: Callable[[], dict[str, dict[str, Any]]],
    check: Callable[[dict[str, dict[str, Any]]], bool],
    timeout: float = 30.0,
) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached: {value}")
        time.sleep(0.1)


def test_events_carry_our_session_and_the_tenants_salt_to_the_replica_that_served(
    servers: dict[str, RunningServer], tenant: TenantKeys
) -> None:
    for served, other in (("replica-a", "replica-b"), ("replica-b", "replica-a")):
        server = servers[served]
        client = server.client(tenant, timeout=120)
        conversation = client.conversations.create().id
        ask(client, conversation, text(f"s{uuid.uuid4().hex[:6]}", 120))
        with admin_of(server) as admin:
            view = wait_for(
                lambda: residency(admin, conversation),  # noqa: B023
                lambda v: v[served]["resident_blocks"] > 0,  # noqa: B023
            )
        assert view[served]["salt_matches_tenant"] is True
        assert view[served]["block_size"] == BLOCK
        assert view[served]["resident_tokens"] == view[served]["resident_blocks"] * BLOCK
        assert view[other]["resident_blocks"] == 0


def test_a_continuation_that_hits_is_resident_on_the_replica_that_served_it(
    servers: dict[str, RunningServer], tenant: TenantKeys
) -> None:
    server = servers["replica-a"]
    client = server.client(tenant, timeout=120)
    conversation = client.conversations.create().id
    first = ask(client, conversation, text(f"h{uuid.uuid4().hex[:6]}", 150))
    with admin_of(server) as admin:
        before = wait_for(
            lambda: residency(admin, conversation),
            lambda v: v["replica-a"]["resident_blocks"] > 0,
        )
        second = ask(client, conversation, text("then", 60))
        assert (
            second.usage.input_tokens_details.cached_tokens
            >= (first.usage.input_tokens // BLOCK) * BLOCK
        )
        after = wait_for(
            lambda: residency(admin, conversation),
            lambda v: v["replica-a"]["resident_blocks"] > before["replica-a"]["resident_blocks"],
        )
        assert after["replica-a"]["last_stored_at"] > before["replica-a"]["last_stored_at"]
        assert after["replica-a"]["evictions"] == []
        assert after["replica-b"]["resident_blocks"] == 0
        timeline = admin.get(f"/tenants/{tenant.id}/conversations/{conversation}/timeline")
        assert [turn["residency"] for turn in timeline.json()["data"]] == [None, None]


def test_a_paused_sessions_eviction_is_recorded_and_explains_its_next_miss(
    servers: dict[str, RunningServer], tenant: TenantKeys
) -> None:
    server = servers["replica-a"]
    client = server.client(tenant, timeout=120)
    paused = client.conversations.create().id
    first = ask(client, paused, text(f"p{uuid.uuid4().hex[:6]}", 150))
    expected = (first.usage.input_tokens // BLOCK) * BLOCK
    with admin_of(server) as admin:
        wait_for(lambda: residency(admin, paused), lambda v: v["replica-a"]["resident_blocks"] > 0)
        time.sleep(1.0)  # idle for a while: the eviction's idle time is measured from here
        # Other agents fill the 2,048-token cache while this one waits on a tool.
        others = server.client(create_tenant(server.db_url), timeout=120)
        for i in range(5):
            ask(others, others.conversations.create().id, text(f"o{i}{uuid.uuid4().hex[:4]}", 160))
        view = wait_for(
            lambda: residency(admin, paused), lambda v: bool(v["replica-a"]["evictions"])
        )
        eviction = view["replica-a"]["evictions"][0]
        assert eviction["blocks"] > 0 and eviction["tokens"] == eviction["blocks"] * BLOCK
        assert eviction["idle_seconds"] is not None and eviction["idle_seconds"] >= 1.0

        resumed = ask(client, paused, text("back", 20))
        measured = resumed.usage.input_tokens_details.cached_tokens
        assert measured < expected, "the evicted prefix cannot have been reused"
        timeline = admin.get(f"/tenants/{tenant.id}/conversations/{paused}/timeline").json()
        cause = timeline["data"][1]["residency"]
        assert cause is not None, timeline["data"][1]
        assert (cause["cause"], cause["replica"]) == ("evicted", "replica-a")
        assert cause["measured_cached_tokens"] == measured
        # One figure with the token account (the parent's prompt + output, token by token).
        account = admin.get(f"/responses/{resumed.id}/token_account").json()["account"]
        if account is not None and account["status"] in ("exact", "diverged"):
            expected = account["expected_cached"]
        assert cause["expected_cached_tokens"] == expected
        assert residency(admin, paused)["replica-a"]["evictions"][0]["before_resume"] is True


@pytest.fixture(scope="module")
def router(replicas: dict[str, Replica]) -> Iterator[str]:
    """vllm-router (round_robin) in front of both replicas; it drops X-Session-ID."""
    binary = subprocess.run(
        [str(SCRIPTS / "setup_router.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    port, metrics_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            binary,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-urls",
            *(r.url for r in replicas.values()),
            "--policy",
            "round_robin",
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(metrics_port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "router did not start"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def batches_received() -> float:
    return sum(
        REGISTRY.get_sample_value("agentic_kv_event_batches_total", {"replica": name}) or 0.0
        for name in ("replica-a", "replica-b")
    )


def test_through_vllm_router_only_the_body_session_reaches_the_replicas(
    router: str,
    replicas: dict[str, Replica],
    kv_db_url: str,
    tenant: TenantKeys,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    endpoints = {r.name: r.endpoint for r in replicas.values()}
    data = tmp_path_factory.mktemp("kv-router")
    with (
        app_server("postgres", kv_db_url, router, data, kv_events_endpoints=endpoints) as ours,
        app_server(
            "postgres",
            kv_db_url,
            router,
            data,
            kv_events_endpoints=endpoints,
            upstream_session_id_in_body=False,
        ) as header_only,
        admin_of(ours) as admin,
    ):
        client = ours.client(tenant, timeout=120)
        conversation = client.conversations.create().id
        for words in (text(f"via{uuid.uuid4().hex[:6]}", 100), text("again", 30)):
            ask(client, conversation, words)
        view = wait_for(
            lambda: residency(admin, conversation),
            lambda v: sum(r["resident_blocks"] for r in v.values()) > 0,
        )
        assert all(r["salt_matches_tenant"] in (True, None) for r in view.values())

        plain = header_only.client(tenant, timeout=120)
        unlabeled = plain.conversations.create().id
        before = batches_received()
        ask(plain, unlabeled, text(f"hdr{uuid.uuid4().hex[:6]}", 100))
        # Its blocks' events arrived (both servers count them) but name no session.
        deadline = time.monotonic() + 30
        while batches_received() < before + 2:
            assert time.monotonic() < deadline, "the replicas' events did not arrive"
            time.sleep(0.1)
        assert sum(r["resident_blocks"] for r in residency(admin, unlabeled).values()) == 0


def test_a_replica_restart_clears_its_coverage_and_it_is_followed_again(
    servers: dict[str, RunningServer], replicas: dict[str, Replica], tenant: TenantKeys
) -> None:
    server = servers["replica-b"]
    client = server.client(tenant, timeout=120)
    conversation = client.conversations.create().id
    ask(client, conversation, text(f"r{uuid.uuid4().hex[:6]}", 120))
    with admin_of(server) as admin:
        wait_for(
            lambda: residency(admin, conversation), lambda v: v["replica-b"]["resident_blocks"] > 0
        )
        replicas["replica-b"].stop()
        view = wait_for(
            lambda: residency(admin, conversation),
            lambda v: v["replica-b"]["resident_blocks"] == 0,
        )
        assert view["replica-b"]["coverage_resets"][-1]["reason"] in ("disconnected", "restart")
        replicas["replica-b"].start()
        ask(client, conversation, text("after", 30))
        view = wait_for(
            lambda: residency(admin, conversation),
            lambda v: v["replica-b"]["resident_blocks"] > 0,
        )
        assert view["replica-b"]["connected"] is True
