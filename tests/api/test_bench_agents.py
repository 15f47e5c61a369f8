"""``agentic-api bench agents``: concurrent agents in tool loops, against the simulator
directly (history carried by the client) and through our server (both databases); and
``vllm_xargs.agentic_context`` reaching the upstream only when the setting is on."""

from __future__ import annotations

import asyncio
import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from agentic_api.cli import app
from agentic_bench.agents import TAG, AgentsConfig, run_agents, summarize
from agentic_bench.agents_report import load_rows
from agentic_bench.client import Target
from agentic_bench.redraw import chart_of
from tests.conftest import RunningServer, running_server
from tests.support.drawings import shown
from tests.support.tenants import TenantKeys, create_admin_key
from tests.upstream_sim import Fail, SimServer

FAST = {"tool_seconds": 0.05, "think_seconds": 0.0, "system_words": 120, "task_words": 20}


def run(target: Target, config: AgentsConfig) -> list[dict[str, Any]]:
    async def work() -> list[dict[str, Any]]:
        try:
            return await run_agents(target, config)
        finally:
            await target.aclose()

    return asyncio.run(work())


def generation_requests(sim: SimServer) -> list[dict[str, Any]]:
    return [r.json for r in sim.requests("/v1/responses")]


@pytest.mark.parametrize("chain", ["previous_response_id", "conversation"])
def test_agents_through_our_server_return_warm_with_forced_calls(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, chain: str
) -> None:
    config = AgentsConfig(
        model=sim.config.model,
        agents=3,
        turns=3,
        chain=chain,  # type: ignore[arg-type]
        block_size=sim.config.block_size,
        api_keys=(tenant.api_key,),
        nonce=f"srv-{chain}-{server.backend}",
        **FAST,  # type: ignore[arg-type]
    )
    rows = run(Target("ours", server.url, stateful=True), config)
    assert sorted((r["agent"], r["turn"]) for r in rows) == [
        (a, t) for a in range(3) for t in (1, 2, 3)
    ]
    assert all(r["status"] == "completed" and r["tool_calls"] == 1 for r in rows)
    for row in rows:
        if row["turn"] == 1:
            assert row["expected_cached_tokens"] is None
        else:
            # Every full block of the previous prompt came back (the simulator keeps all).
            assert row["expected_cached_tokens"] > 0
            assert row["cached_tokens"] >= row["expected_cached_tokens"]
            assert row["warm"] is True
    result = summarize(rows, config)
    assert result["warm_returns"] == result["continuations"] == 6
    assert result["sessions_completed"] == 3 and result["failed_attempts"] == 0
    # The shared system prompt and tools: the later agents' first turns hit them.
    assert result["first_turns_with_shared_prefix_hit"] >= 1
    # No replica header through our server: evictions cannot be told from moves.
    assert result["evicted_while_paused"] is None

    sent = generation_requests(sim)
    assert len(sent) == 9
    assert all(b["tool_choice"] == {"type": "function", "name": "read_file"} for b in sent)
    # Off by default: no program-scheduling hints upstream.
    assert all("vllm_xargs" not in body for body in sent)
    # Each continuation answers the call its previous turn made, tagged with agent/turn.
    for body in sent:
        newest = body["input"][-1]
        text = newest.get("output") or newest.get("content")
        match = TAG.search(str(text))
        assert match is not None and match.group(1) == config.run_tag
        if int(match.group(3)) > 1:
            assert newest["type"] == "function_call_output"


def test_streamed_agents_report_ttft_before_the_end(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    config = AgentsConfig(
        model=sim.config.model,
        agents=2,
        turns=2,
        stream=True,
        api_keys=(tenant.api_key,),
        nonce=f"stream-{server.backend}",
        **FAST,  # type: ignore[arg-type]
    )
    rows = run(Target("ours", server.url, stateful=True), config)
    assert len(rows) == 4
    for row in rows:
        assert row["ttft_s"] is not None and 0 < row["ttft_s"] <= row["latency_s"]
    assert all(r.json["stream"] is True for r in sim.requests("/v1/responses"))


@pytest.mark.parametrize("session_key", [False, True])
def test_a_rerun_with_the_same_nonce_has_the_same_sessions_only_with_session_keys(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, session_key: bool
) -> None:
    """The pinned keep-warm benchmark's premise: the same sessions (hence the same
    consistent-hash placement) in both arms. Without a key, a chain's root session is
    derived from its first items, ids included, which our server mints afresh."""
    config = AgentsConfig(
        model=sim.config.model,
        agents=2,
        turns=2,
        api_keys=(tenant.api_key,),
        nonce=f"rerun-{session_key}-{server.backend}",
        session_key=session_key,
        **FAST,  # type: ignore[arg-type]
    )
    sessions = []
    for _ in range(2):
        before = len(sim.requests("/v1/responses"))
        run(Target("ours", server.url, stateful=True), config)
        sent = sim.requests("/v1/responses")[before:]
        sessions.append({r.headers["x-session-id"] for r in sent})
    assert len(sessions[0]) == 2
    assert (sessions[0] == sessions[1]) is session_key


def test_token_account_columns_are_read_when_the_server_has_them(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    # Any admin JSON per response flattens into account_* columns; the lineage view
    # stands in here for the token account.
    config = AgentsConfig(
        model=sim.config.model,
        agents=1,
        turns=2,
        api_keys=(tenant.api_key,),
        account_path="/admin/v1/responses/{id}/lineage",
        admin_key=create_admin_key(server.db_url),
        nonce=f"account-{server.backend}",
        **FAST,  # type: ignore[arg-type]
    )
    rows = run(Target("ours", server.url, stateful=True), config)
    assert [r["account_response_id"] for r in rows] == [r["response_id"] for r in rows]
    assert {r["account_object"] for r in rows} == {"admin.lineage"}
    # Without the admin key nothing is asked for.
    plain = AgentsConfig(**{**vars(config), "admin_key": None, "nonce": "x"})
    assert not any(
        k.startswith("account_") for r in run(Target("o", server.url, True), plain) for k in r
    )


def test_agentic_context_reaches_the_upstream_only_when_on_and_never_from_the_client(
    db_url: str, tenant: TenantKeys, sim: SimServer, tmp_path: Path
) -> None:
    forged = json.dumps({"program_id": "other-tenant:lead", "expected_resume": True})
    body = {
        "model": sim.config.model,
        "input": "hi",
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "vllm_xargs": {"agentic_context": forged},
    }
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    for on in (False, True):
        with running_server(
            db_url,
            sim,
            tmp_path / str(on),
            router_agentic_context=on,
            router_kv_retention_ttl_seconds=20,
        ) as ours:
            answer = httpx.post(f"{ours.url}/v1/responses", json=body, headers=headers, timeout=20)
            assert answer.status_code == 200, answer.text
            follow = httpx.post(
                f"{ours.url}/v1/responses",
                json={**body, "previous_response_id": answer.json()["id"], "input": "more"},
                headers=headers,
                timeout=20,
            )
            assert follow.status_code == 200, follow.text
        first, second = generation_requests(sim)[-2:]
        if not on:
            assert "vllm_xargs" not in first and "vllm_xargs" not in second
            continue
        contexts = [json.loads(b["vllm_xargs"]["agentic_context"]) for b in (first, second)]
        # Ours, from the lineage: the chain's session (inherited by the continuation,
        # also the X-Session-ID it sends), not the program the client named.
        assert contexts[0] == contexts[1]
        session = sim.requests("/v1/responses")[-1].headers["x-session-id"]
        assert contexts[0]["session_id"] == session
        assert contexts[0]["program_id"] == f"{session}:lead"
        assert contexts[0]["expected_resume"] is True
        assert contexts[0]["kv_retention_ttl_seconds"] == 20


def test_paused_sessions_evicted_by_others_are_counted(tmp_path: Path) -> None:
    base = {"agents": 3, "turns": 3, "chain": "history", "salt": "s", **FAST, "tool_seconds": 0.3}
    with SimServer(replica="sim-a", block_size=32) as roomy:
        rows = run(Target("d", roomy.url, False), AgentsConfig(model="sim-model", **base))  # type: ignore[arg-type]
    roomy_summary = summarize(rows, AgentsConfig(model="sim-model", **base))  # type: ignore[arg-type]
    assert roomy_summary["continuations_with_replica_info"] == 6
    assert roomy_summary["moved_replica"] == 0 and roomy_summary["evicted_while_paused"] == 0
    # A cache that holds the shared prefix and about one session: the others' turns
    # during a pause evict a session's own blocks, on the same replica.
    with SimServer(replica="sim-a", block_size=32, cache_capacity_blocks=30) as tight:
        rows = run(Target("d", tight.url, False), AgentsConfig(model="sim-model", **base))  # type: ignore[arg-type]
    result = summarize(rows, AgentsConfig(model="sim-model", **base))  # type: ignore[arg-type]
    assert result["moved_replica"] == 0
    assert result["evicted_while_paused"] >= 1
    assert result["warm_returns"] == 6 - result["evicted_while_paused"]
    cold = [r for r in rows if r["turn"] > 1 and not r["warm"]]
    assert all(r["same_replica"] and r["cached_tokens"] < r["expected_cached_tokens"] for r in cold)


def test_one_seed_sends_the_same_requests_after_the_same_pauses() -> None:
    def one_run() -> tuple[list[tuple[str, str]], list[tuple[int, int, float]]]:
        config = AgentsConfig(model="sim-model", agents=2, turns=3, chain="history", seed=7, **FAST)  # type: ignore[arg-type]
        with SimServer(block_size=32) as upstream:
            rows = run(Target("d", upstream.url, False), config)
            sent = [r.body for r in upstream.requests("/v1/responses")]
        texts = []
        for raw in sent:
            body = json.loads(raw)
            match = TAG.search(json.dumps(body["input"][-1]))
            assert match is not None
            # Call ids are the model server's: everything else is the seed's.
            texts.append((match.group(0), json.dumps([_no_ids(i) for i in body["input"]])))
        pauses = [(r["agent"], r["turn"], r["pause_s"]) for r in rows]
        return sorted(texts), sorted(pauses)

    assert one_run() == one_run()


def _no_ids(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("id", "call_id")}


def test_a_model_that_answers_in_text_still_gets_the_step_reported(sim: SimServer) -> None:
    config = AgentsConfig(
        model=sim.config.model,
        agents=1,
        turns=2,
        chain="history",
        tool_choice="auto",
        **FAST,  # type: ignore[arg-type]
    )
    rows = run(Target("d", sim.url, False), config)
    assert [r["tool_calls"] for r in rows] == [0, 0]
    assert summarize(rows, config)["turns_without_tool_call"] == 2
    second = generation_requests(sim)[-1]
    assert second["tool_choice"] == "auto"
    newest = second["input"][-1]
    # The prompt grows as in a tool loop: the client's report of the step it ran.
    assert newest["role"] == "user" and "No tool was called" in newest["content"]
    assert len(newest["content"].split()) >= config.tool_output_words


def test_a_failed_turn_is_recorded_and_retried(sim: SimServer) -> None:
    sim.push(Fail(503, message="engine restarting"))
    config = AgentsConfig(
        model=sim.config.model,
        agents=2,
        turns=2,
        chain="history",
        retries=1,
        retry_delay=0.05,
        **FAST,  # type: ignore[arg-type]
    )
    rows = run(Target("d", sim.url, False), config)
    failed = [r for r in rows if r["status"] == "error"]
    assert len(failed) == 1 and "503" in failed[0]["error"] and failed[0]["turn"] == 1
    result = summarize(rows, config)
    assert result["failed_attempts"] == 1 and result["sessions_completed"] == 2
    assert result["turns_served"] == 4


def test_a_refused_turn_is_not_retried_and_ends_that_session(sim: SimServer) -> None:
    sim.push(Fail(400, message="prompt too long"))
    config = AgentsConfig(
        model=sim.config.model,
        agents=1,
        turns=3,
        chain="history",
        retries=3,
        **FAST,  # type: ignore[arg-type]
    )
    rows = run(Target("d", sim.url, False), config)
    assert [(r["turn"], r["status"]) for r in rows] == [(1, "error")]
    assert summarize(rows, config)["sessions_completed"] == 0


def test_cli_runs_write_csv_json_svg_and_compare_in_a_report(tmp_path: Path) -> None:
    runner = CliRunner()
    with SimServer(replica="sim-a", block_size=32) as upstream:
        for label in ("policy-a", "policy-b"):
            result = runner.invoke(
                app,
                [
                    "bench", "agents", "--url", upstream.url, "--chain", "history",
                    "--agents", "2", "--turns", "2", "--tool-seconds", "0.05",
                    "--system-words", "80", "--stream", "--nonce", label,
                    "--label", label, "--out", str(tmp_path), "--name", label,
                ],
            )  # fmt: skip
            assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "policy-a.json").read_text())
    assert data["label"] == "policy-a" and data["config"]["agents"] == 2
    assert "admin_key" not in data["config"] and "api_keys" not in data["config"]
    assert data["summary"]["warm_returns"] == 2
    with (tmp_path / "policy-a.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 4
    typed = load_rows(tmp_path / "policy-a.csv")
    assert {type(r["warm"]) for r in typed if r["turn"] == 2} == {bool}
    drawn = (tmp_path / "policy-a.svg").read_text()
    assert shown(drawn)[1]
    assert shown(chart_of(tmp_path / "policy-a.json")) == shown(drawn)

    report = runner.invoke(
        app,
        [
            "bench", "agents-report", str(tmp_path / "policy-a.json"),
            str(tmp_path / "policy-b.json"), "--out", str(tmp_path), "--name", "cmp",
        ],
    )  # fmt: skip
    assert report.exit_code == 0, report.output
    table = (tmp_path / "cmp.md").read_text()
    assert "| policy-a | 2 / 2 |" in table and "| policy-b | 2 / 2 |" in table
    ET.fromstring((tmp_path / "cmp.svg").read_text())


def test_cli_refuses_an_unknown_chain() -> None:
    result = CliRunner().invoke(app, ["bench", "agents", "--url", "http://x", "--chain", "x"])
    assert result.exit_code != 0
