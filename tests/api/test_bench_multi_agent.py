"""``agentic-api bench agents --multi-agent`` against our server and the simulator: leads
whose every turn spawns a subagent over the lead's history; the run reads every agent's
account from the admin API and reports the tree's reuse and each subagent's first
request against its parent's prefix."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentic_api.cli import app
from tests.conftest import running_server
from tests.support.tenants import create_admin_key, create_tenant
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls


def test_the_multi_agent_workload_reports_every_subagents_first_request(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    for turn in range(2):
        sim.push_for(
            "/root",
            ToolCalls([Call("spawn_agent", {"task_name": f"step{turn}", "message": "Do it."})]),
            Reply(f"Step {turn} done."),
        )
        sim.push_for(f"/root/step{turn}", Reply("Done by the helper."))
    with running_server(fresh_db, sim, tmp_path / "data", router_agentic_context=True) as server:
        tenant = create_tenant(fresh_db)
        result = CliRunner().invoke(
            app,
            [
                "bench", "agents", "--multi-agent", "--url", server.url,
                "--api-key", tenant.api_key, "--admin-key", create_admin_key(fresh_db),
                "--agents", "1", "--turns", "2", "--tool-seconds", "0.05",
                "--system-words", "120", "--max-output-tokens", "200",
                "--out", str(tmp_path), "--name", "tree",
            ],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "tree.json").read_text())
    summary = data["summary"]
    assert summary["subagents"] == 2 and summary["subagent_first_requests"] == 2
    assert summary["subagent_first_hits"] == 2
    assert summary["subagent_first_measured_cached"] == summary["subagent_first_expected_cached"]
    assert summary["subagent_first_expected_cached"] > 0
    assert summary["tree_cached_tokens"] > 0
    assert "admin_key" not in data["config"]
    table = (tmp_path / "tree.md").read_text()
    assert table.splitlines()[-1].startswith("| all | 2 | 2 |")
