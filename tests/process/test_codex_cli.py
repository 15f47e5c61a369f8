"""Codex CLI, unmodified, against our server over the Responses WebSocket: a tool call
round trip and a final answer, all through ``codex exec``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RunningServer
from tests.support.codex import Provider, codex_binary, run_codex, websocket_upgrades
from tests.support.tenants import TenantKeys
from tests.support.typed import served_cached_tokens
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

# Runs the real Codex CLI against a server: seconds.
pytestmark = pytest.mark.slow


def test_codex_exec_over_websocket(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, tmp_path: Path
) -> None:
    binary = codex_binary()
    sim.push(
        ToolCalls([Call("get_goal", {}, call_id="call_goal_1")]), Reply("Goal checked, all done.")
    )
    upgrades_before = websocket_upgrades(server)
    result = run_codex(
        binary,
        tmp_path,
        server,
        tenant,
        sim.config.model,
        "check the goal, then finish",
        provider=Provider(websockets=True),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Goal checked, all done." in result.stdout
    assert "Falling back from WebSockets" not in result.stderr
    assert websocket_upgrades(server) > upgrades_before

    calls = sim.requests("/v1/responses")
    assert len(calls) == 2
    first, second = (call.json for call in calls)
    assert first["store"] is False and first["stream"] is True
    # The second turn replays the first verbatim, then the tool's output for its call.
    outputs = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_goal_1"]
    assert second["input"][: len(first["input"])] == first["input"]
    assert calls[0].headers["x-session-id"] == calls[1].headers["x-session-id"]
    assert calls[0].json["cache_salt"] == calls[1].json["cache_salt"]
    assert second["prompt_cache_key"] == first["prompt_cache_key"]
    assert served_cached_tokens(calls[1]) > 0
