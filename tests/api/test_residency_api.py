"""KV residency over HTTP, on SQLite and PostgreSQL: our server subscribed to a
simulator that publishes vLLM's KV events (the real wire format, from its prefix cache),
and to a bare publisher for what a simulator cannot do (restart its numbering).

Covered: the session reaches the events (body ``session_id``); the admin views for a
conversation and for a response chain's session, with the tenant's salt recognized; an
idle session evicted by another's traffic, shown with its idle time, counted when it
resumes, and its next turn's miss attributed to that eviction in the timeline; a cache
reset and a publisher restart clearing coverage; errors in OpenAI's shape."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from prometheus_client import REGISTRY

from tests.conftest import RunningServer, app_server
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.upstream_sim import SimServer
from tests.upstream_sim.kv_events import KvEventPublisher, stored

BLOCK = 16
CAPACITY_BLOCKS = 40


@pytest.fixture(scope="module")
def ipc_dir() -> Iterator[Path]:
    # ipc:// paths must stay short (about 100 bytes).
    folder = Path(tempfile.mkdtemp(prefix="kv-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def names(backend: str) -> dict[str, str]:
    # Prometheus series are per process: distinct replica names per backend's server.
    return {"sim": f"sim-{backend}", "bare": f"bare-{backend}"}


@pytest.fixture(scope="module")
def kv_sim(ipc_dir: Path, names: dict[str, str]) -> Iterator[SimServer]:
    endpoint = f"ipc://{ipc_dir}/sim-{names['sim']}.ipc"
    with SimServer(
        block_size=BLOCK,
        cache_capacity_blocks=CAPACITY_BLOCKS,
        kv_events_endpoint=endpoint,
        kv_events_topic=names["sim"],
    ) as server:
        yield server


@pytest.fixture(scope="module")
def bare_endpoint(ipc_dir: Path, names: dict[str, str]) -> str:
    return f"ipc://{ipc_dir}/bare-{names['bare']}.ipc"


@pytest.fixture(scope="module")
def kv_server(
    backend: str,
    db_url: str,
    kv_sim: SimServer,
    bare_endpoint: str,
    names: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningServer]:
    endpoints = {
        names["sim"]: kv_sim.config.kv_events_endpoint,
        names["bare"]: bare_endpoint,
    }
    with app_server(
        backend,
        db_url,
        kv_sim.url,
        tmp_path_factory.mktemp("kv-data"),
        kv_events_endpoints=endpoints,
    ) as running:
        yield running


@pytest.fixture
def tenant(kv_server: RunningServer) -> TenantKeys:
    return create_tenant(kv_server.db_url)


@pytest.fixture
def client(kv_server: RunningServer, tenant: TenantKeys) -> OpenAI:
    return kv_server.client(tenant, timeout=20)


@pytest.fixture(scope="module")
def admin(kv_server: RunningServer) -> Iterator[httpx.Client]:
    key = create_admin_key(kv_server.db_url)
    with httpx.Client(
        base_url=f"{kv_server.url}/admin/v1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=20,
    ) as http:
        yield http


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def wait_for(
    read: Callable[[], dict[str, Any]], check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    # Events arrive asynchronously (another thread, another socket): poll the view.
    deadline = time.monotonic() + 15
    while True:
        value = read()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met; last view: {value}")
        time.sleep(0.05)


def replica(view: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [r for r in view["replicas"] if r["replica"] == name]
    (one,) = found
    return one


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def conversation_view(admin: httpx.Client, conversation_id: str) -> Callable[[], dict[str, Any]]:
    def read() -> dict[str, Any]:
        answer = admin.get(f"/conversations/{conversation_id}/residency")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    return read


def test_a_conversations_blocks_are_resident_on_the_replica_that_stored_them(
    client: OpenAI,
    admin: httpx.Client,
    kv_sim: SimServer,
    names: dict[str, str],
    tenant: TenantKeys,
) -> None:
    conversation = client.conversations.create()
    client.responses.create(
        model="sim-model", input=words("hello", 60), conversation=conversation.id
    )
    body = kv_sim.last("/v1/responses").json
    assert body["session_id"] == conversation.id  # survives routers that drop the header

    view = wait_for(
        conversation_view(admin, conversation.id),
        lambda v: replica(v, names["sim"])["resident_tokens"] > 0,
    )
    assert view["object"] == "admin.session_residency"
    assert (view["session_id"], view["tenant_id"]) == (conversation.id, tenant.id)
    assert view["conversation_id"] == conversation.id and view["tracking"] is True
    sim = replica(view, names["sim"])
    assert sim["connected"] is True and sim["block_size"] == BLOCK
    assert sim["resident_tokens"] == sim["resident_blocks"] * BLOCK
    assert sim["salt_matches_tenant"] is True
    assert sim["first_stored_at"] <= sim["last_stored_at"]
    assert sim["evictions"] == []
    bare = replica(view, names["bare"])
    assert (bare["resident_blocks"], bare["salt_matches_tenant"]) == (0, None)
    assert view["resident_tokens"] == sim["resident_tokens"]
    assert "not a guarantee" in view["note"].lower()


def test_a_response_chain_is_shown_under_its_session(
    client: OpenAI, admin: httpx.Client, names: dict[str, str]
) -> None:
    first = client.responses.create(model="sim-model", input=words("chain", 50))
    second = client.responses.create(
        model="sim-model", input=words("more", 20), previous_response_id=first.id
    )

    def read() -> dict[str, Any]:
        return dict(admin.get(f"/responses/{second.id}/residency").json())

    view = wait_for(read, lambda v: replica(v, names["sim"])["resident_blocks"] > 0)
    assert view["response_id"] == second.id and view["conversation_id"] is None
    root = admin.get(f"/responses/{first.id}/residency").json()
    assert root["session_id"] == view["session_id"]  # one session along the chain
    assert replica(view, names["sim"])["salt_matches_tenant"] is True


def test_another_tenants_salt_is_not_the_tenants(
    kv_server: RunningServer, admin: httpx.Client, names: dict[str, str], tenant: TenantKeys
) -> None:
    # The salt in the events is compared with the tenant's current one: rotating the
    # tenant's salt makes the blocks stored under the old one "not the tenant's".
    client = kv_server.client(tenant, timeout=20)
    conversation = client.conversations.create()
    client.responses.create(
        model="sim-model", input=words("salted", 40), conversation=conversation.id
    )
    wait_for(
        conversation_view(admin, conversation.id),
        lambda v: replica(v, names["sim"])["salt_matches_tenant"] is True,
    )
    assert admin.post(f"/tenants/{tenant.id}/rotate_salt").status_code == 200
    view = conversation_view(admin, conversation.id)()
    assert replica(view, names["sim"])["salt_matches_tenant"] is False


def test_an_idle_sessions_eviction_explains_its_next_turns_miss(
    kv_server: RunningServer,
    client: OpenAI,
    admin: httpx.Client,
    kv_sim: SimServer,
    names: dict[str, str],
    tenant: TenantKeys,
) -> None:
    name = names["sim"]
    kv_sim.reset()  # an empty cache: this test's traffic decides what is evicted
    idle_before = metric("agentic_kv_sessions_evicted_while_idle_total", replica=name)
    resumed_before = metric("agentic_kv_evicted_before_resume_total", replica=name)
    observed_before = metric("agentic_kv_idle_before_evicted_resume_seconds_count", replica=name)

    paused = client.conversations.create()
    client.responses.create(model="sim-model", input=words("paused", 120), conversation=paused.id)
    read = conversation_view(admin, paused.id)
    wait_for(read, lambda v: replica(v, name)["resident_blocks"] > 0)

    # Meanwhile another tenant's agent fills the small cache: the paused session's blocks go.
    other = kv_server.client(create_tenant(kv_server.db_url), timeout=20)
    busy = other.conversations.create()
    other.responses.create(model="sim-model", input=words("busy", 300), conversation=busy.id)
    view = wait_for(read, lambda v: bool(replica(v, name)["evictions"]))
    (eviction,) = replica(view, name)["evictions"]
    assert eviction["blocks"] > 0 and eviction["tokens"] == eviction["blocks"] * BLOCK
    assert eviction["idle_seconds"] is not None and eviction["idle_seconds"] >= 0
    assert eviction["before_resume"] is False
    assert metric("agentic_kv_sessions_evicted_while_idle_total", replica=name) == idle_before + 1

    resumed = client.responses.create(
        model="sim-model", input=words("back", 10), conversation=paused.id
    )
    assert resumed.usage is not None
    assert metric("agentic_kv_evicted_before_resume_total", replica=name) == resumed_before + 1
    assert (
        metric("agentic_kv_idle_before_evicted_resume_seconds_count", replica=name)
        == observed_before + 1
    )
    view = read()
    assert replica(view, name)["evictions"][0]["before_resume"] is True

    timeline = admin.get(f"/tenants/{tenant.id}/conversations/{paused.id}/timeline").json()
    first, second = timeline["data"]
    assert first["residency"] is None
    cause = second["residency"]
    assert cause is not None, second
    assert cause["cause"] == "evicted" and cause["replica"] == name
    assert cause["measured_cached_tokens"] == resumed.usage.input_tokens_details.cached_tokens
    assert cause["measured_cached_tokens"] < cause["expected_cached_tokens"]
    assert cause["eviction"]["blocks"] == eviction["blocks"]
    assert name in cause["explanation"] and "idle" in cause["explanation"]
    assert second["cache_break"]["broken"] is False


def test_a_continuation_that_hits_has_no_residency_cause(
    client: OpenAI,
    admin: httpx.Client,
    kv_sim: SimServer,
    names: dict[str, str],
    tenant: TenantKeys,
) -> None:
    kv_sim.reset()
    conversation = client.conversations.create()
    for text in (words("steady", 30), words("again", 5)):
        client.responses.create(model="sim-model", input=text, conversation=conversation.id)
    timeline = admin.get(f"/tenants/{tenant.id}/conversations/{conversation.id}/timeline").json()
    assert [turn["residency"] for turn in timeline["data"]] == [None, None]
    assert timeline["data"][1]["usage"]["cached_tokens"] > 0


def test_a_cache_reset_clears_the_replicas_coverage(
    client: OpenAI, admin: httpx.Client, kv_sim: SimServer, names: dict[str, str]
) -> None:
    name = names["sim"]
    conversation = client.conversations.create()
    client.responses.create(
        model="sim-model", input=words("reset", 30), conversation=conversation.id
    )
    read = conversation_view(admin, conversation.id)
    wait_for(read, lambda v: replica(v, name)["resident_blocks"] > 0)
    before = metric("agentic_kv_coverage_resets_total", replica=name, reason="cleared")
    assert httpx.post(f"{kv_sim.url}/_sim/reset_prefix_cache").status_code == 200
    view = wait_for(read, lambda v: replica(v, name)["resident_blocks"] == 0)
    assert replica(view, name)["coverage_resets"][-1]["reason"] == "cleared"
    assert metric("agentic_kv_coverage_resets_total", replica=name, reason="cleared") == before + 1
    assert metric("agentic_kv_resident_tokens", replica=name) == 0


def test_a_restarted_publisher_clears_coverage_and_is_followed_again(
    client: OpenAI, admin: httpx.Client, bare_endpoint: str, names: dict[str, str]
) -> None:
    name = names["bare"]
    conversation = client.conversations.create()
    read = conversation_view(admin, conversation.id)

    def store(publisher: KvEventPublisher, first_hash: int) -> None:
        publisher.publish(
            [
                stored(
                    [first_hash, first_hash + 1], None, list(range(32)), BLOCK, "s", conversation.id
                )
            ]
        )

    def store_then_read(publisher: KvEventPublisher, first_hash: int) -> dict[str, Any]:
        store(publisher, first_hash)
        return read()

    publisher = KvEventPublisher(bare_endpoint, name)
    try:
        # Until the subscription reaches it, a PUB socket drops what it sends: resend.
        wait_for(
            lambda: store_then_read(publisher, 10),
            lambda v: replica(v, name)["resident_blocks"] == 2,
        )
    finally:
        publisher.close()
    view = wait_for(read, lambda v: replica(v, name)["connected"] is False)
    assert replica(view, name)["resident_blocks"] == 0
    assert replica(view, name)["coverage_resets"][-1]["reason"] == "disconnected"

    restarted = KvEventPublisher(bare_endpoint, name)  # numbering starts at 0 again
    try:
        view = wait_for(
            lambda: store_then_read(restarted, 20),
            lambda v: replica(v, name)["resident_blocks"] == 2,
        )
        assert replica(view, name)["connected"] is True
        assert replica(view, name)["salt_matches_tenant"] is False
    finally:
        restarted.close()


def test_unknown_ids_and_tenant_keys_are_refused(
    kv_server: RunningServer, admin: httpx.Client, tenant: TenantKeys
) -> None:
    for path, param in (
        (f"/conversations/conv_{uuid.uuid4().hex}/residency", "conversation_id"),
        (f"/responses/resp_{uuid.uuid4().hex}/residency", "response_id"),
    ):
        answer = admin.get(path)
        assert answer.status_code == 404
        error = answer.json()["error"]
        assert error["param"] == param and set(error) == {"message", "type", "param", "code"}
    refused = httpx.get(
        f"{kv_server.url}/admin/v1/conversations/conv_x/residency",
        headers={"Authorization": f"Bearer {tenant.api_key}"},
    )
    assert refused.status_code == 401


def test_metrics_expose_residency_per_replica(
    kv_server: RunningServer, names: dict[str, str]
) -> None:
    text = httpx.get(f"{kv_server.url}/metrics").text
    assert f'agentic_kv_resident_tokens{{replica="{names["sim"]}"}}' in text
    assert "agentic_kv_evicted_before_resume_total" in text


def test_without_endpoints_nothing_is_tracked(server: RunningServer) -> None:
    key = create_admin_key(server.db_url)
    client = server.client(create_tenant(server.db_url), timeout=20)
    conversation = client.conversations.create()
    answer = httpx.get(
        f"{server.url}/admin/v1/conversations/{conversation.id}/residency",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200
    assert (answer.json()["tracking"], answer.json()["replicas"]) == (False, [])


def response_view(admin: httpx.Client, response_id: str) -> Callable[[], dict[str, Any]]:
    def read() -> dict[str, Any]:
        answer = admin.get(f"/responses/{response_id}/residency")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    return read


def branch_on(view: dict[str, Any], name: str) -> dict[str, Any]:
    branch = view["branch"]
    assert branch is not None and branch["available"] is True, view
    found: list[dict[str, Any]] = [r for r in branch["replicas"] if r["replica"] == name]
    (one,) = found
    return one


def test_forked_branches_answer_for_their_own_prefix_after_one_is_evicted(
    kv_server: RunningServer,
    client: OpenAI,
    admin: httpx.Client,
    kv_sim: SimServer,
    names: dict[str, str],
) -> None:
    name = names["sim"]
    kv_sim.reset()
    root = client.responses.create(model="sim-model", input=words("trunk", 40))
    left = client.responses.create(
        model="sim-model", input=words("left", 30), previous_response_id=root.id
    )
    right = client.responses.create(
        model="sim-model", input=words("right", 30), previous_response_id=root.id
    )

    def whole(view: dict[str, Any]) -> bool:
        found = branch_on(view, name)
        return bool(found["resident_tokens"] >= found["reusable_tokens"])

    for fork in (left, right):
        view = wait_for(response_view(admin, fork.id), whole)
        assert view["branch"]["replica"] == name and view["branch"]["response_id"] == fork.id

    # Another tenant's small turns push out the least recently used blocks: the left
    # branch's own (the right one's lookup refreshed the shared trunk after them).
    other = kv_server.client(create_tenant(kv_server.db_url), timeout=20)
    read_left, read_right = response_view(admin, left.id), response_view(admin, right.id)
    full_left = branch_on(read_left(), name)["reusable_tokens"]
    for i in range(40):
        other.responses.create(model="sim-model", input=words(f"o{i}x", 6))
        left_now = branch_on(read_left(), name)["resident_tokens"]
        if left_now < full_left:
            break
    left_view = wait_for(read_left, lambda v: branch_on(v, name)["resident_tokens"] < full_left)
    right_view = read_right()
    left_branch, right_branch = branch_on(left_view, name), branch_on(right_view, name)
    assert 0 < left_branch["resident_tokens"] < left_branch["reusable_tokens"]
    assert right_branch["resident_tokens"] >= right_branch["reusable_tokens"]
    # One session for the whole chain: its tally cannot tell the branches apart.
    assert left_view["session_id"] == right_view["session_id"]
    assert replica(left_view, name) == replica(right_view, name)

    # Each branch's next continuation is served what its own prefix residency said.
    again_right = client.responses.create(
        model="sim-model", input=words("more", 4), previous_response_id=right.id
    )
    again_left = client.responses.create(
        model="sim-model", input=words("more", 4), previous_response_id=left.id
    )
    assert again_left.usage is not None and again_right.usage is not None
    assert again_left.usage.input_tokens_details.cached_tokens == left_branch["resident_tokens"]
    assert again_right.usage.input_tokens_details.cached_tokens >= (right_branch["reusable_tokens"])


def test_a_conversation_starting_on_a_shared_prefix_finds_it_resident(
    client: OpenAI, admin: httpx.Client, kv_sim: SimServer, names: dict[str, str]
) -> None:
    name = names["sim"]
    kv_sim.reset()
    document = words("shared", 80)
    first, second = client.conversations.create(), client.conversations.create()
    client.responses.create(model="sim-model", input=document, conversation=first.id)
    client.responses.create(model="sim-model", input=document, conversation=second.id)
    view = wait_for(
        conversation_view(admin, second.id),
        lambda v: v["branch"] is not None and branch_on(v, name)["resident_tokens"] > 0,
    )
    branch = branch_on(view, name)
    assert branch["resident_tokens"] >= branch["reusable_tokens"]
    assert view["branch"]["response_id"] is not None
    # In the default report mode the second session stored only the blocks it added.
    assert replica(view, name)["resident_tokens"] < branch["resident_tokens"]


def test_a_branch_without_token_ids_says_so(
    backend: str,
    db_url: str,
    kv_sim: SimServer,
    names: dict[str, str],
    tenant: TenantKeys,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    endpoints = {names["sim"]: kv_sim.config.kv_events_endpoint}
    with app_server(
        backend,
        db_url,
        kv_sim.url,
        tmp_path_factory.mktemp("kv-no-ids"),
        kv_events_endpoints=endpoints,
        token_artifacts="off",
    ) as plain:
        made = plain.client(tenant, timeout=20).responses.create(
            model="sim-model", input=words("plain", 20)
        )
        with httpx.Client(
            base_url=f"{plain.url}/admin/v1",
            headers={"Authorization": f"Bearer {create_admin_key(plain.db_url)}"},
            timeout=20,
        ) as http:
            branch = response_view(http, made.id)()["branch"]
    assert branch["available"] is False and "no token ids" in branch["reason"]
    assert branch["replicas"] == [] and branch["resident_tokens"] == 0
