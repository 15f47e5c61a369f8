"""A streaming client of ``POST /v1/responses`` that leaves, with
``AGENTIC_STREAM_DISCONNECT=cancel``: the SSE response notices (``http/sse.py``'s
watcher), the turn is cancelled, its upstream request closed, and nothing is stored.
(With ``complete``, the default, see ``test_checkpoints.py``: the turn commits.)"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import running_server
from tests.support.sql import scalar
from tests.support.tenants import create_tenant
from tests.upstream_sim import Reply, SimServer


@pytest.mark.slow  # waits out the disconnect: seconds
def test_with_cancel_a_streaming_client_that_leaves_stops_its_turn(
    db_url: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(db_url, sim, tmp_path, stream_disconnect="cancel") as server:
        tenant = create_tenant(db_url)
        sim.push(Reply("slow answer " * 40, event_delay=0.05))
        with httpx.stream(
            "POST",
            f"{server.url}/v1/responses",
            json={"model": sim.config.model, "input": "x", "stream": True},
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=20,
        ) as response:
            first = next(line for line in response.iter_lines() if line.startswith("data: "))
        response_id = first.split('"id":"', 1)[1].split('"', 1)[0]
        # The turn stops: the model server sees its request closed mid-answer.
        assert sim.wait_aborted(1, timeout=10)
        # Cancelled mid-answer, before its commit: nothing of the turn is stored.
        stored = scalar(db_url, "SELECT count(*) FROM responses WHERE id = :id", id=response_id)
        assert stored == 0
