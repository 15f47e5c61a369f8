"""Bad input gets a clear OpenAI-shaped error and changes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agentic_api.storage.database import Database
from agentic_api.storage.responses import ResponseRepository
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import SimServer

MODEL = "sim-model"

CASES: list[tuple[str, Any, int, str | None]] = [
    ("missing model", {"input": "x"}, 400, "model"),
    ("missing input", {"model": MODEL}, 400, "input"),
    ("model wrong type", {"model": 5, "input": "x"}, 400, "model"),
    ("input wrong type", {"model": MODEL, "input": 5}, 400, "input"),
    ("item not an object", {"model": MODEL, "input": ["hi"]}, 400, "input[0]"),
    ("item without type", {"model": MODEL, "input": [{"text": "hi"}]}, 400, "input[0].type"),
    (
        "bad role",
        {"model": MODEL, "input": [{"type": "message", "role": "boss", "content": "x"}]},
        400,
        "input[0].role",
    ),
    (
        "tool output without call id",
        {"model": MODEL, "input": [{"type": "function_call_output", "output": "x"}]},
        400,
        "input[0].call_id",
    ),
    (
        "both conversation and parent",
        {"model": MODEL, "input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"},
        400,
        "previous_response_id",
    ),
    (
        "too much metadata",
        {"model": MODEL, "input": "x", "metadata": {f"k{i}": "v" for i in range(17)}},
        400,
        "metadata",
    ),
    (
        "metadata value too long",
        {"model": MODEL, "input": "x", "metadata": {"k": "v" * 513}},
        400,
        "metadata",
    ),
    (
        "metadata key too long",
        {"model": MODEL, "input": "x", "metadata": {"k" * 65: "v"}},
        400,
        "metadata",
    ),
    (
        "temperature out of range",
        {"model": MODEL, "input": "x", "temperature": 3},
        400,
        "temperature",
    ),
    ("tool without type", {"model": MODEL, "input": "x", "tools": [{"name": "f"}]}, 400, "tools"),
    (
        "too many input items",
        {"model": MODEL, "input": [{"role": "user", "content": "x"}] * 10_001},
        400,
        "input",
    ),
    (
        "background without store",
        {"model": MODEL, "input": "x", "background": True, "store": False},
        400,
        "background",
    ),
]


def count_responses(db_url: str, tenant_id: str) -> int:
    async def run() -> int:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.read() as session:
                return await ResponseRepository(session).count_for_tenant(tenant_id)
        finally:
            await db.close()

    return asyncio.run(run())


@pytest.mark.parametrize(("case", "body", "status", "param"), CASES, ids=[c[0] for c in CASES])
def test_bad_create_requests(
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
    case: str,
    body: Any,
    status: int,
    param: str | None,
) -> None:
    response = httpx.post(
        f"{server.url}/v1/responses",
        json=body,
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(param or "")
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b'{"model": '])
def test_unparseable_bodies(server: RunningServer, tenant: TenantKeys, raw: bytes) -> None:
    response = httpx.post(
        f"{server.url}/v1/responses",
        content=raw,
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] in ("invalid_json", "empty_body")


def test_input_items_limit_bounds(server: RunningServer, tenant: TenantKeys) -> None:
    for query in ("limit=0", "limit=101", "order=sideways"):
        response = httpx.get(
            f"{server.url}/v1/responses/resp_x/input_items?{query}",
            headers={"authorization": f"Bearer {tenant.api_key}"},
        )
        assert response.status_code == 400, query
        assert response.json()["error"]["type"] == "invalid_request_error"
