"""The gateway placing rounds on named replicas, for the placement tests: simulators that
publish KV events, our server in front of them (``AGENTIC_UPSTREAM_REPLICAS``), and what
the tests read back — which simulator answered a session, the decisions in the admin
timeline, a response's resident prefix per replica."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openai import OpenAI
from openai.types.conversations import Conversation
from openai.types.responses import Response

from agentic_api.cache.placement import home_of
from tests.conftest import RunningServer, app_server
from tests.support.admin_api import AdminApi
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.waiting import eventually
from tests.upstream_sim import SimServer

BLOCK = 16


@contextmanager
def kv_sims(count: int, tag: str) -> Iterator[list[SimServer]]:
    """``count`` simulators, each publishing its prefix cache's KV events."""
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


def dead_url() -> str:
    """A loopback URL nothing listens on (a port bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@dataclass
class Gateway:
    """Our server placing on ``names`` (the simulators in order), a tenant's client and
    an admin client."""

    server: RunningServer
    names: list[str]
    sims: list[SimServer]
    tenant: TenantKeys
    client: OpenAI
    admin: AdminApi

    def conversation(self, home: str) -> Conversation:
        """A new conversation (its id is the session) whose hashed home is ``home``."""
        for _ in range(200):
            conversation = self.client.conversations.create()
            if home_of(conversation.id, self.names) == home:
                return conversation
        raise AssertionError("no conversation homed there")

    def turn(self, conversation: Conversation, text: str, **fields: Any) -> Response:
        created: Response = self.client.responses.create(
            model="sim-model", conversation=conversation.id, input=text, **fields
        )
        return created

    def placements(self, conversation: Conversation) -> list[Any]:
        """The conversation's turns' placement decisions, oldest first (admin timeline)."""
        return [p for t in self.timeline(conversation) for p in t["placements"]]

    def timeline(self, conversation: Conversation) -> list[Any]:
        path = f"/tenants/{self.tenant.id}/conversations/{conversation.id}/timeline"
        data: list[Any] = self.admin.get(path)["data"]
        return data

    def resident_on(self, response_id: str, replica: str) -> int:
        """Leading tokens of the response's prompt + output the replica holds."""
        view = self.admin.get(f"/responses/{response_id}/residency")
        return sum(r["resident_tokens"] for r in view["replicas"] if r["replica"] == replica)

    def wait_resident(self, response_id: str, replica: str) -> None:
        eventually(lambda: self.resident_on(response_id, replica) > 0, f"{response_id} resident")


@contextmanager
def placing_gateway(
    backend: str,
    db_url: str,
    sims: list[SimServer],
    names: list[str],
    tmp: Path,
    **overrides: object,
) -> Iterator[Gateway]:
    settings: dict[str, object] = {
        "upstream_replicas": {name: sim.url for name, sim in zip(names, sims, strict=True)},
        "kv_events_endpoints": {
            name: sim.config.kv_events_endpoint for name, sim in zip(names, sims, strict=True)
        },
        "placement_probe_seconds": 0.05,
        **overrides,
    }
    # upstream_base_url is not used with named replicas: point it nowhere.
    with app_server(backend, db_url, dead_url(), tmp, **settings) as server:
        tenant = create_tenant(server.db_url)
        admin = AdminApi(server.url, server.db_url, timeout=20)
        try:
            yield Gateway(server, names, sims, tenant, server.client(tenant, timeout=20), admin)
        finally:
            admin.close()


def served(sim: SimServer, session_id: str) -> int:
    """Model calls of the session the simulator answered."""
    return sum(1 for r in sim.requests("/v1/responses") if r.json.get("session_id") == session_id)


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def wait_probed(sim: SimServer, reads: int = 2) -> None:
    """Until the gateway's probe has read the simulator's /metrics ``reads`` more times: a
    load set before this call is then what the placement book holds (a read is stored
    before the next one starts)."""
    start = sim.calls("/metrics")
    eventually(lambda: sim.calls("/metrics") >= start + reads, "the probe's next reads")
