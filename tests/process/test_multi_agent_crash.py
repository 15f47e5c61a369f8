"""A multi-agent tree killed mid-run (SIGKILL, a real server process; SQLite and
PostgreSQL): the background response ends ``failed`` with ``worker_lost`` once its lease
runs out, truthfully (nothing of the tree is a checkpoint: it cannot be continued), and
no agent runs again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import BadRequestError

from tests.process.test_crash_safety import LEASE_SECONDS, TERMINAL, client_of, sse
from tests.support.processes import Process, process_env
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Call, Hang, SimServer, ToolCalls
from tests.upstream_sim.state import agent_of

pytestmark = pytest.mark.slow

BETAS: Any = ["responses_multi_agent=v1"]


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def test_a_tree_killed_mid_run_fails_after_its_lease(
    fresh_db: str, sim: SimServer, tmp_path: Path, processes: list[Process]
) -> None:
    env = process_env(
        fresh_db,
        sim.url,
        tmp_path / "data",
        lease_seconds=LEASE_SECONDS,
        background_poll_seconds=0.2,
        router_agentic_context=True,
    )
    tenant: TenantKeys = create_tenant(fresh_db)
    server = Process.serve(env)
    processes.append(server)
    client = client_of(server, tenant)
    sim.push_for(
        "/root",
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Work long."})]),
        ToolCalls([Call("wait_agent", {})]),
    )
    sim.push_for("/root/alpha", Hang())
    queued = client.beta.responses.create(
        model=sim.config.model,
        input="Delegate.",
        background=True,
        multi_agent={"enabled": True},
        betas=BETAS,
    )
    assert sim.wait_for(
        lambda: any(agent_of(r.json) == "/root/alpha" for r in sim.requests("/v1/responses")),
        timeout=20,
    )
    server.kill()
    sent = len(sim.requests("/v1/responses"))
    assert scalar(fresh_db, "SELECT status FROM responses WHERE id = :id", id=queued.id) == (
        "in_progress"
    )

    restarted = Process.serve(env)
    processes.append(restarted)
    client = client_of(restarted, tenant)
    deadline = time.monotonic() + 20
    while (found := client.beta.responses.retrieve(queued.id, betas=BETAS)).status not in TERMINAL:
        assert time.monotonic() < deadline, f"still {found.status}"
        time.sleep(0.05)
    assert found.status == "failed"
    # Its stored events, on the beta path (they hold the beta's items).
    events = sse(
        httpx.get(
            f"{restarted.url}/v1/responses/{queued.id}",
            params={"stream": "true", "beta": "true"},
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=20,
        )
    )
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "worker_lost"
    # Nothing of the tree is continuable, and no agent ran again after the crash.
    with pytest.raises(BadRequestError):
        client.beta.responses.create(
            model=sim.config.model,
            input="more",
            previous_response_id=queued.id,
            multi_agent={"enabled": True},
            betas=BETAS,
        )
    assert len(sim.requests("/v1/responses")) == sent
