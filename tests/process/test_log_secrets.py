"""No secret reaches a log line at any level: a real ``agentic-api serve`` at
``AGENTIC_LOG_LEVEL=debug`` (JSON and console formats), its whole output captured, while
tenant keys, admin keys, MCP headers and the upstream key travel over HTTP and WebSocket
(SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.support.mcp_server import McpTestServer, start_mcp_server
from tests.support.processes import SECRET as SERVER_SECRET
from tests.support.processes import Process, process_env
from tests.support.tenants import create_admin_key, create_tenant
from tests.upstream_sim import Call, SimServer, ToolCalls

MCP_HEADER_SECRET = "mcp-header-secret-5f1e2d3c4b"
MCP_TOKEN_SECRET = "mcp-bearer-secret-0a9b8c7d6e"
UPSTREAM_KEY = "upstream-key-secret-77aa66bb"


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    server = start_mcp_server()
    yield server
    server.stop()


def mcp_tool(url: str) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": "tools",
        "server_url": url,
        "require_approval": "never",
        "headers": {"X-Tool-Secret": MCP_HEADER_SECRET},
        "authorization": MCP_TOKEN_SECRET,
    }


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_no_secret_in_debug_logs(
    fresh_db: str, sim: SimServer, mcp_server: McpTestServer, tmp_path: Path, log_format: str
) -> None:
    tenant = create_tenant(fresh_db)
    admin_key = create_admin_key(fresh_db)
    env = process_env(
        fresh_db,
        sim.url,
        tmp_path / "data",
        log_level="debug",
        log_format=log_format,
        mcp_allow_loopback="true",
        upstream_api_key=UPSTREAM_KEY,
    )
    process = Process.serve(env)
    try:
        auth = {"authorization": f"Bearer {tenant.api_key}"}
        with httpx.Client(base_url=process.url, timeout=30) as http:
            plain = http.post(
                "/v1/responses", headers=auth, json={"model": sim.config.model, "input": "hi"}
            )
            assert plain.status_code == 200, plain.text
            sim.push(ToolCalls([Call("tools__add", {"a": 1, "b": 2})]))
            tools = http.post(
                "/v1/responses",
                headers=auth,
                json={
                    "model": sim.config.model,
                    "input": "add",
                    "tools": [mcp_tool(mcp_server.url)],
                },
            )
            assert tools.status_code == 200, tools.text
            assert mcp_server.calls_of("add"), "the MCP server was called with the headers"
            wrong = http.get("/v1/responses/resp_x", headers={"authorization": "Bearer sk-bad"})
            assert wrong.status_code == 401
            admin = http.get("/admin/v1/tenants", headers={"authorization": f"Bearer {admin_key}"})
            assert admin.status_code == 200, admin.text
        ws_url = process.url.replace("http://", "ws://") + "/v1/responses"
        with connect(ws_url, additional_headers=auth, open_timeout=10) as socket:
            frame = {"type": "response.create", "model": sim.config.model, "input": "hi"}
            socket.send(json.dumps({**frame, "tools": [mcp_tool(mcp_server.url)]}))
            sim.push(ToolCalls([Call("tools__add", {"a": 1, "b": 2})]))
            while json.loads(socket.recv(timeout=30))["type"] not in (
                "response.completed",
                "response.failed",
                "error",
            ):
                pass
    finally:
        process.stop()
    output = process.output()
    assert "debug" in output.lower(), "the server logged at debug level"
    secrets = {
        "tenant key": tenant.api_key,
        "admin key": admin_key,
        "MCP header": MCP_HEADER_SECRET,
        "MCP authorization": MCP_TOKEN_SECRET,
        "upstream key": UPSTREAM_KEY,
        "server secret": SERVER_SECRET,
    }
    leaked = [name for name, secret in secrets.items() if secret in output]
    assert not leaked, f"{leaked} in the log:\n{output[-4000:]}"
