"""Claude Code, unmodified, against our server's Anthropic Messages API: a tool call
(its own Read tool, run on a real file) and a final answer, through ``claude -p``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lineage import mint_cache_salt
from tests.conftest import TEST_SECRET, RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

# Runs the real Claude Code CLI against a server: seconds.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def claude_binary() -> str:
    # Installs the pinned CLI on first use (npm); a missing toolchain fails the test.
    result = subprocess.run(
        [str(REPO / "scripts" / "install_claude_code.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]


def test_claude_code_print_mode_runs_a_tool_and_answers(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, tmp_path: Path
) -> None:
    binary = claude_binary()
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    goal = work / "goal.txt"
    goal.write_text("the goal is 42\n")
    sim.push(
        ToolCalls([Call("Read", {"file_path": str(goal)}, call_id="toolu_read_1")]),
        Reply("The goal is 42, all done."),
    )
    model = sim.config.model
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE", "OPENAI"))
    }
    env.update(
        HOME=str(home),
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY=tenant.api_key,
        # Whatever model it would pick for side tasks is ours too.
        ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
        ANTHROPIC_SMALL_FAST_MODEL=model,
        # Its default (32,000) plus its ~10k-token prompt exceeds the simulated model's
        # context; vLLM would refuse it the same way (and Claude Code shows that error).
        CLAUDE_CODE_MAX_OUTPUT_TOKENS="4096",
        DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    result = subprocess.run(
        [binary, "-p", "Read goal.txt and tell me the goal.", "--model", model],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    assert "The goal is 42, all done." in result.stdout

    calls = sim.requests("/v1/messages")
    assert len(calls) == 2, [c.json.get("messages", [])[-1:] for c in calls]
    first, second = calls
    for call in calls:
        assert call.json["stream"] is True
        assert call.json["cache_salt"] == mint_cache_salt(TEST_SECRET.encode(), tenant.id, 1)
        # Claude Code's beta flags reach the model server; its key does not.
        assert "claude-code-20250219" in call.headers["anthropic-beta"]
        assert "x-api-key" not in call.headers
    # One session for the whole task (Claude Code names it in x-claude-code-session-id).
    assert first.headers["x-session-id"] == second.headers["x-session-id"]
    # The second request is the history plus Claude Code's tool_use and its result.
    assert second.json["messages"][: len(first.json["messages"])][0] == first.json["messages"][0]
    tool_use = second.json["messages"][-2]["content"][-1]
    assert tool_use["type"] == "tool_use" and tool_use["id"] == "toolu_read_1"
    result_block = second.json["messages"][-1]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "toolu_read_1"
    assert "the goal is 42" in str(result_block["content"])
    assert second.cached_tokens is not None and second.cached_tokens > 0
