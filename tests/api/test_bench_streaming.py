"""``agentic-api bench streaming`` and the CPU readings of ``bench overhead --pid``: the SSE
reader, the /proc sampler, and both workloads against the simulator, directly and through
our server (in process, and as a real ``agentic-api serve`` whose pid is sampled)."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_api.cli import app
from agentic_bench.client import Target
from agentic_bench.overhead import OverheadConfig, run_overhead
from agentic_bench.process_cpu import CpuMeter, ProcessGone, read_stat, tree_cpu_seconds
from agentic_bench.redraw import chart_of
from agentic_bench.streaming import (
    Round,
    SseSplitter,
    StreamingConfig,
    StreamTarget,
    failures,
    run_streaming,
    summarize,
    table,
)
from tests.conftest import make_database, running_server
from tests.support.drawings import shown
from tests.support.processes import Process, process_env
from tests.support.tenants import create_tenant
from tests.upstream_sim import Fail, Malformed, SimServer, StreamError

REPLY_TOKENS = 12
# created, in_progress, item added, part added, (deltas), text done, part done, item done,
# completed: what the simulator sends around the deltas of a one-message reply.
FRAMING_EVENTS = 8


@pytest.fixture(scope="module")
def reply_sim() -> Iterator[SimServer]:
    """Replies of exactly REPLY_TOKENS text tokens, decoded at 1 ms per token."""
    with SimServer(default_reply_tokens=REPLY_TOKENS, decode_seconds_per_token=0.001) as sim:
        yield sim


@pytest.fixture(autouse=True)
def _clean_reply_sim(request: pytest.FixtureRequest) -> None:
    if "reply_sim" in request.fixturenames:
        request.getfixturevalue("reply_sim").reset()


def run(
    targets: list[StreamTarget], config: StreamingConfig, pids: dict[str, int] | None = None
) -> list[Round]:
    async def work() -> list[Round]:
        try:
            return await run_streaming(targets, config, pids)
        finally:
            for target in targets:
                await target.aclose()

    return asyncio.run(work())


# -- the SSE reader -------------------------------------------------------------------------


def test_sse_splitter_finds_each_event_across_chunk_boundaries() -> None:
    stream = (
        b'event: a\r\ndata: {"type":"a"}\r\n\r\n'
        b": keep-alive\n\n"
        b"data: line one\ndata: line two\n\n"
        b'event: b\ndata: {"type":"b"}\n\n'
        b"data: [DONE]\n\n"
        b"data: unfinished"
    )
    for size in (1, 3, 7, len(stream)):
        splitter = SseSplitter()
        found = [
            data
            for start in range(0, len(stream), size)
            for data in splitter.feed(stream[start : start + size])
        ]
        assert found == [b'{"type":"a"}', b"line one\nline two", b'{"type":"b"}', b"[DONE]"]


# -- the CPU sampler ------------------------------------------------------------------------


def _stat_line(pid: int, comm: str, ppid: int, ticks: tuple[int, int, int, int]) -> str:
    utime, stime, cutime, cstime = ticks
    # Fields 3..13 (state, ppid, pgrp, session, tty, tpgid, flags, 4 fault counters), then
    # utime stime cutime cstime, then the rest of a real line.
    return (
        f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304 10 0 0 0 "
        f"{utime} {stime} {cutime} {cstime} 20 0 3 0 1000 100000 200\n"
    )


def test_tree_cpu_adds_threads_descendants_and_reaped_children(tmp_path: Path) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    tree = {
        100: ("my server) (x", 1, (50, 20, 5, 5)),  # a name that holds ") (" itself
        101: ("worker", 100, (30, 10, 0, 0)),
        102: ("grandchild", 101, (7, 3, 0, 0)),
        200: ("someone else", 1, (900, 900, 0, 0)),
    }
    for pid, (comm, ppid, ticks) in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat_line(pid, comm, ppid, ticks))
    (tmp_path / "self").mkdir()  # not a pid: skipped

    root = read_stat(100, tmp_path)
    assert (root.ppid, root.own, root.reaped) == (1, 70 / tick, 10 / tick)
    assert tree_cpu_seconds(100, tmp_path) == pytest.approx((70 + 10 + 40 + 10) / tick)
    assert tree_cpu_seconds(101, tmp_path) == pytest.approx(50 / tick)
    with pytest.raises(ProcessGone):
        tree_cpu_seconds(999, tmp_path)


def test_the_sampler_sees_a_busy_child_of_an_idle_process() -> None:
    # An idle parent whose child spins: the parent's own CPU stays flat while its tree's
    # goes up, as `serve --workers N` spends its CPU in its workers.
    spin = "while True: pass"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])",
        ]
    )
    try:
        meter = CpuMeter({"server": parent.pid})
        meter.start("server")
        before, own_before = tree_cpu_seconds(parent.pid), read_stat(parent.pid).own
        used = 0.0
        deadline = time.monotonic() + 20
        while used < 0.2 and time.monotonic() < deadline:
            time.sleep(0.1)
            used = tree_cpu_seconds(parent.pid) - before
        assert used >= 0.2, f"the busy child's CPU was not seen: {used:.3f} s"
        measured = meter.stop("server")
        assert measured is not None and measured >= used
        assert meter.total("server") == measured
        # Python's start-up is all the parent did: far less than its child has spun.
        assert read_stat(parent.pid).own - own_before < used / 2
        assert meter.total("elsewhere") is None and not meter.covers("elsewhere")
    finally:
        for child in _children_of(parent.pid):
            os.kill(child, 9)
        parent.kill()
        parent.wait(timeout=10)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if read_stat(int(entry.name)).ppid == pid:
                    found.append(int(entry.name))
            except (ProcessGone, OSError):
                continue
    return found


# -- the workload, in process ---------------------------------------------------------------


def test_streams_direct_and_through_our_server_count_every_delta(
    db_url: str, reply_sim: SimServer, tmp_path: Path
) -> None:
    tenant = create_tenant(db_url)
    config = StreamingConfig(
        model=reply_sim.config.model, streams=5, rounds=2, output_tokens=REPLY_TOKENS
    )
    with running_server(db_url, reply_sim, tmp_path) as server:
        targets = [
            StreamTarget("direct", reply_sim.url, stateful=False),
            StreamTarget("ours", server.url, stateful=True, api_key=tenant.api_key),
        ]
        rounds = run(targets, config)

    # One warm-up round each, then the measured ones, the first target rotating.
    assert [(r.target, r.round, r.position) for r in rounds] == [
        ("direct", 0, 0),
        ("ours", 0, 1),
        ("ours", 1, 0),
        ("direct", 1, 1),
    ]
    generated = reply_sim.requests("/v1/responses")
    assert len(generated) == 2 * (1 + 2) * 5
    # The simulator generated REPLY_TOKENS text tokens and the end of sequence each time.
    assert {r.output_tokens for r in generated} == {REPLY_TOKENS + 1}
    assert {r.json["max_output_tokens"] for r in generated} == {REPLY_TOKENS + 1}
    # Direct: unstored, the bench's own salt; ours (also store: false upstream) the tenant's.
    salts = [r.json["cache_salt"] for r in generated if r.json["store"] is False]
    assert len(salts) == 30 and salts.count(config.cache_salt) == 3 * 5

    for round_ in rounds:
        assert len(round_.records) == 5 and round_.wall_s > 0 and round_.cpu_s is None
        for record in round_.records:
            assert record.ok, record.error
            assert record.deltas == REPLY_TOKENS
            assert record.events == REPLY_TOKENS + FRAMING_EVENTS
            assert record.terminal == "response.completed"
            assert record.output_tokens == REPLY_TOKENS + 1
            times = [
                t
                for t in (
                    record.ttfb_ms,
                    record.first_event_ms,
                    record.ttft_ms,
                    record.last_delta_ms,
                    record.terminal_ms,
                    record.total_ms,
                )
                if t is not None
            ]
            assert len(times) == 6 and times == sorted(times)
            assert record.tail_ms is not None and record.tail_ms >= 0
            assert record.total_ms is not None and record.last_delta_ms is not None
            assert record.tail_ms == pytest.approx(record.total_ms - record.last_delta_ms)
            # At least the decode time of the reply (1 ms per token).
            assert record.total_ms >= REPLY_TOKENS

    rows = summarize(rounds, config, "direct")
    by = {row["target"]: row for row in rows}
    assert [row["target"] for row in rows] == ["direct", "ours"]
    for row in rows:
        assert row["streams"] == 10 and row["failed"] == 0 and row["wrong_delta_count"] == 0
        assert row["deltas"] == 10 * REPLY_TOKENS
        assert row["deltas_per_s"] == pytest.approx(row["deltas"] / row["wall_s"])
        assert row["ttft_p50_ms"] <= row["ttft_p95_ms"] <= row["total_p95_ms"]
        assert row["cpu_ms_per_1k_events"] is None
        assert row["client_cpu_ms_per_1k_events"] > 0
    assert by["direct"]["deltas_per_s_vs_baseline"] == 1.0
    assert by["direct"]["added_ttft_p50_ms"] == 0
    assert by["ours"]["added_ttft_p50_ms"] == pytest.approx(
        by["ours"]["ttft_p50_ms"] - by["direct"]["ttft_p50_ms"]
    )
    assert by["ours"]["deltas_per_s_vs_baseline"] == pytest.approx(
        by["ours"]["deltas_per_s"] / by["direct"]["deltas_per_s"]
    )
    assert failures(rounds) == {}
    printed = table(rows, "direct")
    assert "direct" in printed and "ours" in printed


def test_failed_streams_are_counted_and_reported(
    db_url: str, reply_sim: SimServer, tmp_path: Path
) -> None:
    tenant = create_tenant(db_url)
    # No warm-up: the first six generation requests take these, in arrival order; direct's
    # round comes first, so it gets the first three, ours the next three.
    reply_sim.push(
        Fail(500),
        Malformed(events=['{"type": "response.created"', "not json"]),
        StreamError(after_events=5),
        StreamError(after_events=5),
    )
    with running_server(db_url, reply_sim, tmp_path) as server:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "streaming",
                "--direct",
                reply_sim.url,
                "--target",
                f"ours={server.url}",
                "--api-key",
                f"ours={tenant.api_key}",
                "--streams",
                "3",
                "--rounds",
                "1",
                "--warmup-rounds",
                "0",
                "--output-tokens",
                str(REPLY_TOKENS),
                "--out",
                str(tmp_path),
                "--name",
                "failing",
            ],
        )
    # Every file is written and the failures are printed; the exit status says so.
    assert result.exit_code == 1, result.output
    data = json.loads((tmp_path / "failing.json").read_text())
    by = {row["target"]: row for row in data["results"]}
    assert by["direct"]["failed"] == 3 and by["direct"]["streams"] == 3
    assert by["ours"]["failed"] == 1 and by["ours"]["streams"] == 3
    reasons = data["failures"]
    assert sum(reasons["direct"].values()) == 3 and sum(reasons["ours"].values()) == 1
    assert any(reason.startswith("HTTP 500") for reason in reasons["direct"])
    assert any("not a typed JSON object" in reason for reason in reasons["direct"])
    assert any(reason.startswith("error event") for reason in reasons["direct"])
    assert any(reason.startswith("error event") for reason in reasons["ours"])
    assert "FAILED direct" in result.output and "FAILED ours" in result.output
    # Latencies are over the streams that completed: ours' two.
    assert by["ours"]["deltas"] >= 2 * REPLY_TOKENS
    with (tmp_path / "failing_streams.csv").open() as handle:
        streams = list(csv.DictReader(handle))
    assert len(streams) == 6
    assert sum(1 for s in streams if s["ok"] == "False") == 4
    assert all(s["error"] for s in streams if s["ok"] == "False")


# -- a real server process: its CPU ---------------------------------------------------------


@pytest.fixture(scope="module")
def served(
    reply_sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Process, str]]:
    """``agentic-api serve`` on SQLite, a real process whose pid the bench samples."""
    folder = tmp_path_factory.mktemp("bench-streaming-serve")
    url, _ = make_database("sqlite", folder)
    process = Process.serve(process_env(url, reply_sim.url, folder))
    try:
        yield process, create_tenant(url).api_key
    finally:
        process.stop()


@pytest.mark.slow
def test_cli_reports_our_server_cpu_per_event(
    served: tuple[Process, str], reply_sim: SimServer, tmp_path: Path
) -> None:
    process, key = served
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "streaming",
            "--direct",
            reply_sim.url,
            "--target",
            f"ours={process.url}",
            "--api-key",
            f"ours={key}",
            "--pid",
            f"ours={process.popen.pid}",
            "--streams",
            "6",
            "--rounds",
            "2",
            "--output-tokens",
            str(REPLY_TOKENS),
            "--out",
            str(tmp_path),
            "--name",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "cpu.json").read_text())
    assert data["command"] == "streaming" and data["pids"] == ["ours"]
    assert data["output_tokens"] == REPLY_TOKENS and data["max_output_tokens"] == REPLY_TOKENS + 1
    assert len(data["machine"]["load_average"]) == 3
    by = {row["target"]: row for row in data["results"]}
    assert by["direct"]["cpu_ms_per_1k_events"] is None
    ours = by["ours"]
    assert ours["events"] == 2 * 6 * (REPLY_TOKENS + FRAMING_EVENTS)
    # Relaying and storing 240 events costs our server some CPU: more than nothing, less
    # than the whole rounds' wall time on every core.
    assert ours["cpu_s"] > 0
    assert ours["cpu_ms_per_1k_events"] == pytest.approx(
        ours["cpu_s"] * 1e6 / ours["events"], rel=1e-3
    )
    assert ours["cpu_busy_cores"] <= (os.cpu_count() or 1)
    cpu_rounds = [r for r in data["rounds"] if r["target"] == "ours"]
    assert len(cpu_rounds) == 2 and all(r["cpu_s"] is not None for r in cpu_rounds)
    with (tmp_path / "cpu_streams.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 2 * 2 * 6
    drawn = (tmp_path / "cpu.svg").read_text()
    assert shown(chart_of(tmp_path / "cpu.json")) == shown(drawn)
    svg = ET.fromstring(drawn)
    titles = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert any("CPU per 1,000" in t for t in titles)


@pytest.mark.slow
def test_overhead_reports_server_cpu_per_turn_by_pid(
    served: tuple[Process, str], reply_sim: SimServer
) -> None:
    process, key = served
    direct = Target("direct", reply_sim.url, stateful=False)
    ours = Target("ours", process.url, stateful=True, api_key=key)
    # Enough turns that the server's CPU time passes a clock tick (10 ms) on any machine.
    config = OverheadConfig(model=reply_sim.config.model, depths=(2,), probes=24, warmup=1)

    async def work() -> list[dict[str, Any]]:
        try:
            rows, _ = await run_overhead(
                [direct, ours], config, "direct", {"ours": process.popen.pid}
            )
            return rows
        finally:
            await direct.aclose()
            await ours.aclose()

    rows = asyncio.run(work())
    by = {row["target"]: row for row in rows}
    assert by["direct"]["server_cpu_ms_per_turn"] is None
    assert by["ours"]["server_cpu_ms_per_turn"] > 0


def test_pids_must_name_a_target(reply_sim: SimServer) -> None:
    result = CliRunner().invoke(
        app, ["bench", "streaming", "--direct", reply_sim.url, "--pid", "peer=1"]
    )
    assert result.exit_code != 0 and "unknown targets" in result.output
