"""A subagent's own response has the residency truth of any response (issue 37), on both
databases: our server follows a simulator that publishes vLLM's KV events, and the admin
residency view of a subagent's response matches its own stored token ids (its last
round's prompt + output) against what the replica holds, as for the root."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_residency_api import wait_for
from tests.conftest import RunningServer
from tests.support.admin_api import AdminApi
from tests.support.multi_agent import (
    ALPHA,
    BETA,
    by_agent,
    create_tree,
    dumped,
    script_two_helpers,
    spawned_ids,
    tree_app,
)
from tests.support.tenants import create_tenant
from tests.upstream_sim import SimServer


@pytest.fixture(scope="module")
def kv_sim(backend: str) -> Iterator[SimServer]:
    # ipc:// paths must stay short (about 100 bytes).
    folder = Path(tempfile.mkdtemp(prefix="kv-ma-"))
    try:
        with SimServer(
            kv_events_endpoint=f"ipc://{folder}/sim.ipc", kv_events_topic=f"ma-{backend}"
        ) as server:
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def kv_tree_server(
    backend: str, db_url: str, kv_sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    endpoints = {f"ma-{backend}": kv_sim.config.kv_events_endpoint}
    data_dir = tmp_path_factory.mktemp("kv-tree")
    with tree_app(backend, db_url, kv_sim.url, data_dir, kv_events_endpoints=endpoints) as running:
        yield running


def test_a_subagents_response_shows_its_own_branch_resident(
    kv_tree_server: RunningServer, kv_sim: SimServer
) -> None:
    client = kv_tree_server.client(create_tenant(kv_tree_server.db_url), timeout=30)
    script_two_helpers(kv_sim)
    root = create_tree(client)
    ids = spawned_ids(dumped(root))
    with AdminApi(kv_tree_server.url, kv_tree_server.db_url) as admin:
        for name in (ALPHA, BETA):
            last = by_agent(kv_sim)[name][-1]

            def read(response_id: str = ids[name]) -> dict[str, Any]:
                return dict(admin.get(f"/responses/{response_id}/residency")["branch"])

            branch = wait_for(read, lambda b: (b["resident_tokens"] or 0) > 0)
            assert branch["available"] is True, branch
            assert branch["tokens"] == (last.prompt_tokens or 0) + (last.output_tokens or 0)
            # Every full block the simulator still holds of the subagent's own tokens.
            assert branch["resident_tokens"] >= kv_sim.config.block_size
