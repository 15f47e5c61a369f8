"""Branch residency against a real vLLM (CPU, tiny random Llama, a 2,048-token KV cache,
KV events on ipc://): two branches forked from one response of one session, other traffic
evicting one branch's own blocks, and the admin view answering for each branch's own
prefix — the evicted one shows it, its sibling does not, the session's tally cannot tell
them apart — and each branch's next continuation served what its residency said.

The replica is started for the module, or reused from ``AGENTIC_KV_REPLICA_URL`` with its
events on ``AGENTIC_KV_REPLICA_ENDPOINT`` (started as ``Replica.start`` does: a 2,048-token
cache, block 32). Runs on PostgreSQL (see test_kv_residency.py's ``kv_db_url``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.conftest import RunningServer, app_server
from tests.real_vllm.conftest import BLOCK_SIZE
from tests.real_vllm.test_kv_residency import Replica, admin_of, text, wait_for
from tests.support.servers import free_port
from tests.support.tenants import TenantKeys, create_tenant

pytestmark = pytest.mark.real_vllm

REPLICA = "replica-solo"


@pytest.fixture(scope="module")
def replica() -> Iterator[tuple[str, str]]:
    """(url, event endpoint) of one replica."""
    given, endpoint = (
        os.environ.get("AGENTIC_KV_REPLICA_URL"),
        os.environ.get("AGENTIC_KV_REPLICA_ENDPOINT"),
    )
    if given and endpoint:
        yield given.rstrip("/"), endpoint
        return
    folder = Path(tempfile.mkdtemp(prefix="kvb-"))
    started = Replica(REPLICA, free_port(), f"ipc://{folder}/{REPLICA}.ipc")
    try:
        started.start()
        yield started.url, started.endpoint
    finally:
        started.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server(
    replica: tuple[str, str], kv_db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    url, endpoint = replica
    with app_server(
        "postgres",
        kv_db_url,
        url,
        tmp_path_factory.mktemp("kv-branch"),
        kv_events_endpoints={REPLICA: endpoint},
        token_artifacts="required",
    ) as running:
        yield running


def branch(admin: httpx.Client, response_id: str) -> dict[str, Any]:
    answer = admin.get(f"/responses/{response_id}/residency")
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    assert view["branch"]["available"] is True, view
    (found,) = [r for r in view["branch"]["replicas"] if r["replica"] == REPLICA]
    return {**found, "session": next(r for r in view["replicas"] if r["replica"] == REPLICA)}


def whole(found: dict[str, Any]) -> bool:
    resident = found["resident_tokens"]
    return resident is not None and bool(resident >= found["reusable_tokens"])


def expected_of(admin: httpx.Client, response_id: str) -> int:
    account = admin.get(f"/responses/{response_id}/token_account").json()["account"]
    assert account["status"] == "exact", account
    return int(account["expected_cached"])


def test_a_forked_branch_whose_blocks_were_evicted_shows_it_and_its_sibling_does_not(
    server: RunningServer, kv_db_url: str
) -> None:
    tenant: TenantKeys = create_tenant(kv_db_url)
    client: OpenAI = server.client(tenant, timeout=120)

    def ask(words: str, parent: str | None = None) -> Any:
        return client.responses.create(
            model="tiny-llama",
            input=words,
            previous_response_id=parent,
            temperature=0,
            max_output_tokens=4,
        )

    tag = uuid.uuid4().hex[:6]
    # Sizes in words scale with the block (written for 32 tokens; ~3.5 tokens a word).
    scale = max(1, BLOCK_SIZE // 32)
    trunk = ask(text(f"trunk{tag}", 60 * scale))
    # Each branch adds well over three blocks of its own: an eviction of a few of them
    # cannot reach the trunk or the sibling's.
    left = ask(text(f"left{tag}", 60 * scale), trunk.id)
    right = ask(text(f"right{tag}", 60 * scale), trunk.id)
    with admin_of(server) as admin:
        for fork in (left, right):
            wait_for(lambda: {"b": branch(admin, fork.id)}, lambda v: whole(v["b"]))  # noqa: B023

        # vLLM frees a finished request's blocks tail first behind those freed before: the
        # left branch's own blocks are the next to go. Small turns of another tenant until
        # they start going.
        others = server.client(create_tenant(kv_db_url), timeout=120)
        for i in range(60):
            others.responses.create(
                model="tiny-llama", input=text(f"o{i}{tag}", 12 * scale), max_output_tokens=1
            )
            if not whole(branch(admin, left.id)):
                break
        evicted, sibling = branch(admin, left.id), branch(admin, right.id)
        assert evicted["resident_tokens"] < evicted["reusable_tokens"], evicted
        assert whole(sibling), sibling
        # One session for the chain: its tally is the same whichever branch is asked about.
        assert evicted["session"] == sibling["session"]
        assert evicted["session"]["resident_tokens"] > evicted["resident_tokens"]

        # Each continuation is served what its branch's residency said just before it
        # (the first one's new blocks may evict some of the other's: read it again).
        for fork in (left, right):
            predicted = branch(admin, fork.id)["resident_tokens"]
            more = ask(text(f"more{tag}", 8), fork.id)
            measured = more.usage.input_tokens_details.cached_tokens
            assert measured == min(predicted, expected_of(admin, more.id)), (fork.id, predicted)


def test_after_a_restart_a_prefix_cached_before_is_unknown_then_rebuilt_by_the_next_turn(
    replica: tuple[str, str], kv_db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 38, item 16: our server restarts while the replica keeps its cache. The
    trunk's blocks were reported to the process that is gone: the new one reads the
    trunk's residency as unknown (never 0), and once a continuation was served those
    blocks and stored its own under them, its branch is whole again — and the next
    continuation is served what that said."""
    url, endpoint = replica
    tenant: TenantKeys = create_tenant(kv_db_url)
    tag = uuid.uuid4().hex[:6]

    def serve() -> Any:
        return app_server(
            "postgres",
            kv_db_url,
            url,
            tmp_path_factory.mktemp("kv-restart"),
            kv_events_endpoints={REPLICA: endpoint},
            token_artifacts="required",
        )

    def ask(client: OpenAI, words: str, parent: str | None = None) -> Any:
        return client.responses.create(
            model="tiny-llama",
            input=words,
            previous_response_id=parent,
            temperature=0,
            max_output_tokens=4,
        )

    with serve() as before, admin_of(before) as admin:
        trunk = ask(before.client(tenant, timeout=120), text(f"trunk{tag}", 60))
        wait_for(lambda: {"b": branch(admin, trunk.id)}, lambda v: whole(v["b"]))

    with serve() as after, admin_of(after) as admin:
        client = after.client(tenant, timeout=120)
        unknown = branch(admin, trunk.id)
        assert unknown["resident_tokens"] is None and unknown["known_tokens"] == 0, unknown
        view = admin.get(f"/responses/{trunk.id}/residency").json()["branch"]
        assert view["resident_tokens"] is None, view

        child = ask(client, text(f"child{tag}", 40), trunk.id)
        expected = expected_of(admin, child.id)
        # The trunk's blocks were still held: the child hit in full.
        assert child.usage.input_tokens_details.cached_tokens == expected > 0
        rebuilt = wait_for(lambda: {"b": branch(admin, child.id)}, lambda v: whole(v["b"]))
        assert rebuilt["b"]["resident_tokens"] >= expected

        predicted = branch(admin, child.id)["resident_tokens"]
        more = ask(client, text(f"more{tag}", 8), child.id)
        measured = more.usage.input_tokens_details.cached_tokens
        assert measured == min(predicted, expected_of(admin, more.id)) > expected
