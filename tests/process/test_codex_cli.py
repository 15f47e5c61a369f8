"""Codex CLI, unmodified, against our server over the Responses WebSocket: a tool call
round trip and a final answer, all through ``codex exec``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx

from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

REPO = Path(__file__).resolve().parents[2]


def codex_binary() -> str:
    # Installs the pinned CLI on first use (npm); a missing toolchain fails the test.
    result = subprocess.run(
        [str(REPO / "scripts" / "install_codex.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]


def websocket_upgrades(server: RunningServer) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    for line in text.splitlines():
        if line.startswith("agentic_http_requests_total{") and 'method="WS"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_codex_exec_over_websocket(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, tmp_path: Path
) -> None:
    binary = codex_binary()
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'model = "{sim.config.model}"\n'
        'model_provider = "agentic"\n'
        "[model_providers.agentic]\n"
        'name = "agentic"\n'
        f'base_url = "{server.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "AGENTIC_CODEX_TEST_KEY"\n'
        "supports_websockets = true\n"
    )
    sim.push(
        ToolCalls([Call("get_goal", {}, call_id="call_goal_1")]), Reply("Goal checked, all done.")
    )
    upgrades_before = websocket_upgrades(server)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEX"))}
    env.update(CODEX_HOME=str(home), AGENTIC_CODEX_TEST_KEY=tenant.api_key)
    result = subprocess.run(
        [binary, "exec", "--skip-git-repo-check", "check the goal, then finish"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
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
    assert calls[1].cached_tokens > 0
