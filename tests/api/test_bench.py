"""``agentic-api bench``: statistics, CSV/JSON/SVG output, and both workloads run against
the simulator (directly and through our server)."""

from __future__ import annotations

import asyncio
import csv
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_api.cli import app
from agentic_bench.client import Target, TurnResult
from agentic_bench.continuations import ContinuationConfig, chart, run_continuations
from agentic_bench.output import write_csv, write_json
from agentic_bench.overhead import (
    Chain,
    OverheadConfig,
    Probes,
    add_overhead,
    probe_interleaved,
    run_overhead,
)
from agentic_bench.overhead import write_outputs as write_overhead
from agentic_bench.redraw import chart_of
from agentic_bench.stats import full_blocks, ideal_cached, percentile, summary, upper_cached
from tests.conftest import RunningServer
from tests.support.drawings import shown
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import SimServer

SVG = "{http://www.w3.org/2000/svg}"


def test_percentiles_interpolate_between_ranks() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 95) == pytest.approx(4.8)
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert math.isnan(percentile([], 50))
    stats = summary([float(v) for v in range(1, 101)])
    assert stats["n"] == 100 and stats["mean"] == 50.5
    assert stats["p50"] == pytest.approx(50.5) and stats["p99"] == pytest.approx(99.01)
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_block_aligned_ideal_and_upper_bound() -> None:
    assert full_blocks(95, 32) == 64 and full_blocks(96, 32) == 96 and full_blocks(0, 32) == 0
    # Every full block of the previous prompt...
    assert ideal_cached(previous_prompt=330, prompt=499, block_size=32) == 320
    assert ideal_cached(previous_prompt=320, prompt=499, block_size=32) == 320
    # ...capped by the last token of this prompt, which vLLM always recomputes.
    assert ideal_cached(previous_prompt=320, prompt=321, block_size=32) == 320
    assert ideal_cached(previous_prompt=320, prompt=320, block_size=32) == 288
    # The last generated token was never fed back: 330 + 24 - 1 = 353 -> 352.
    assert upper_cached(330, 24, 500, 32) == 352
    assert upper_cached(330, 1, 500, 32) == 320
    assert upper_cached(330, 24, 340, 32) == 320


def test_csv_json_and_svg_outputs(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"pair": 0, "ratio": 0.5, "replica": None},
        {"pair": 1, "ratio": math.nan, "x": 1},
    ]
    write_csv(tmp_path / "r.csv", rows)
    with (tmp_path / "r.csv").open() as handle:
        read = list(csv.DictReader(handle))
    assert read == [
        {"pair": "0", "ratio": "0.5", "replica": "", "x": ""},
        {"pair": "1", "ratio": "", "replica": "", "x": "1"},
    ]
    write_json(tmp_path / "s.json", {"a": math.nan, "b": [1.23456789, math.inf]})
    assert json.loads((tmp_path / "s.json").read_text()) == {"a": None, "b": [1.234568, None]}
    svg = chart(
        [
            {"pair": 0, "hit_ratio": 0.5, "ideal_cached_tokens": 32, "input_tokens": 64,
             "cold_latency_s": 1.0, "latency_s": 0.5},
            {"pair": 1, "hit_ratio": 1.0, "ideal_cached_tokens": 64, "input_tokens": 64,
             "cold_latency_s": 2.0, "latency_s": math.nan},
        ],
        "t <&>",
    )  # fmt: skip
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    heading = root.find(f"{SVG}text")
    assert heading is not None and heading.text == "t <&>"
    hit, latency = root.findall(f"{SVG}svg")  # one panel each, stacked
    bars = [r for r in hit.iter(f"{SVG}rect") if "rect" in r.get("class", "").split()]
    assert len(bars) == 4  # hit and ideal ratio for each pair
    # The bars for 1.0 are twice as tall as those for 0.5, all standing on the axis.
    heights = sorted(float(b.get("height", "0")) for b in bars)
    assert heights == pytest.approx([heights[0], heights[0], 2 * heights[0], 2 * heights[0]])
    assert len({round(float(b.get("y", "0")) + float(b.get("height", "0")), 6) for b in bars}) == 1
    assert len(list(latency.iter(f"{SVG}circle"))) == 3  # the NaN latency is left out
    assert "<script" not in svg


def test_continuations_through_our_server_reach_the_ideal(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    other = create_tenant(server.db_url)
    target = Target("ours", server.url, stateful=True)
    config = ContinuationConfig(
        model=sim.config.model,
        pairs=4,
        prompt_words=150,
        followup_words=10,
        block_size=sim.config.block_size,
        api_keys=(tenant.api_key, other.api_key),
    )

    async def run() -> list[dict[str, Any]]:
        try:
            return await run_continuations(target, config, concurrency=2)
        finally:
            await target.aclose()

    rows = asyncio.run(run())
    assert [r["pair"] for r in rows] == [0, 1, 2, 3]
    for row in rows:
        assert row["cold_cached_tokens"] == 0
        assert row["ideal_cached_tokens"] > 0
        assert row["ideal_cached_tokens"] <= row["cached_tokens"] <= row["upper_cached_tokens"]
        assert row["measured_over_ideal"] >= 1.0
        assert row["hit_ratio"] == row["cached_tokens"] / row["input_tokens"]
    # Two tenants were used: the pairs went out under two different cache salts.
    salts = {r.json["cache_salt"] for r in sim.requests("/v1/responses")}
    assert len(salts) == 2
    ET.fromstring(chart(rows, "t"))


def test_continuations_direct_report_the_replica(tmp_path: Path) -> None:
    with SimServer(replica="sim-a", block_size=32) as upstream:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "continuations",
                "--url",
                upstream.url,
                "--direct",
                "--salt",
                "s1",
                "--pairs",
                "3",
                "--prompt-words",
                "120",
                "--out",
                str(tmp_path),
            ],
        )
        assert result.exit_code == 0, result.output
        sent = upstream.requests("/v1/responses")
    assert all(r.json["cache_salt"] == "s1" and r.json["store"] is False for r in sent)
    # The continuation carries the cold turn's input and output back as its own input.
    assert len(sent[1].json["input"]) == len(sent[0].json["input"]) + 2
    with (tmp_path / "continuations.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3
    assert {r["replica"] for r in rows} == {"sim-a"} and {r["same_replica"] for r in rows} == {
        "True"
    }
    summary_data = json.loads((tmp_path / "continuations.json").read_text())
    assert summary_data["summary"]["pairs"] == 3
    assert summary_data["summary"]["pairs_at_or_above_ideal"] == 3
    # bench chart draws the same chart again from the run's JSON and CSV.
    drawn = (tmp_path / "continuations.svg").read_text()
    assert len(shown(drawn)[1]) == 3 * 4  # hit and ideal bars, cold and continuation dots
    assert shown(chart_of(tmp_path / "continuations.json")) == shown(drawn)


def test_overhead_measures_each_depth_and_our_round_trips_stay_flat(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    direct = Target("direct", sim.url, stateful=False)
    ours = Target("ours", server.url, stateful=True, api_key=tenant.api_key)
    config = OverheadConfig(
        model=sim.config.model, depths=(2, 8), probes=6, concurrency=3, warmup=1
    )

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        try:
            return await run_overhead([direct, ours], config, "direct")
        finally:
            await direct.aclose()
            await ours.aclose()

    rows, chains = asyncio.run(run())
    assert [(r["target"], r["depth"]) for r in rows] == [
        ("direct", 2),
        ("ours", 2),
        ("direct", 8),
        ("ours", 8),
    ]
    assert len(chains) == 2 * (1 + 7)
    for row in rows:
        assert row["probes"] == 6 and row["turns_per_s"] > 0
        assert row["p50_s"] <= row["p95_s"] <= row["p99_s"]
    by = {(r["target"], r["depth"]): r for r in rows}
    # Both carry the same history: same prompt sizes at the same depth.
    for depth in (2, 8):
        assert (
            by[("ours", depth)]["input_tokens_mean"] == by[("direct", depth)]["input_tokens_mean"]
        )
        assert by[("direct", depth)]["added_p50_ms"] == 0
    assert by[("ours", 8)]["input_tokens_mean"] > by[("ours", 2)]["input_tokens_mean"]
    # Rehydrating a deeper history costs no extra database round trips.
    assert by[("direct", 2)]["sql_statements_per_turn"] is None
    assert by[("ours", 2)]["sql_statements_per_turn"] > 0
    # (an API-key cache refresh may add one lookup to a probe; one query per ancestor
    # would add six statements to every depth-8 turn)
    flat = by[("ours", 2)]["sql_statements_per_turn"] + 0.5
    assert by[("ours", 8)]["sql_statements_per_turn"] <= flat


def test_added_latency_is_relative_to_the_baseline_at_the_same_depth() -> None:
    rows = [
        {"target": "direct", "depth": 10, "p50_s": 0.010, "p95_s": 0.020, "p99_s": 0.030},
        {"target": "ours", "depth": 10, "p50_s": 0.012, "p95_s": 0.025, "p99_s": 0.031},
        {"target": "ours", "depth": 40, "p50_s": 0.5, "p95_s": 0.5, "p99_s": 0.5},
    ]
    add_overhead(rows, "direct")
    assert rows[1]["added_p50_ms"] == pytest.approx(2.0)
    assert rows[1]["added_p95_ms"] == pytest.approx(5.0)
    assert rows[0]["added_p99_ms"] == 0
    assert rows[2]["added_p50_ms"] is None


class RecordingTarget:
    """Stands in for a Target: answers at once and records which target got each probe."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.stateful, self._log = name, True, log

    async def create(
        self, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> TurnResult:
        self._log.append(self.name)
        await asyncio.sleep(0)
        return TurnResult(f"resp_{len(self._log)}", 0.001, 10, 0, 1, [], None, "completed")


def test_probes_alternate_between_targets_batch_by_batch() -> None:
    log: list[str] = []
    phases = [
        Probes(RecordingTarget(name, log), Chain(last_id="resp_0"), name)  # type: ignore[arg-type]
        for name in ("a", "b", "c")
    ]
    config = OverheadConfig(model="m", probes=5, concurrency=2)
    asyncio.run(probe_interleaved(phases, config))
    # Batches of two (the last of one), the first target rotating: abc, bca, cab.
    assert log == ["a", "a", "b", "b", "c", "c", "b", "b", "c", "c", "a", "a", "c", "a", "b"]
    assert all(len(phase.results) == 5 and phase.wall_s > 0 for phase in phases)


def test_bench_chart_redraws_an_overhead_run_and_refuses_a_foreign_json(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"target": target, "depth": depth, "p50_s": p50, "p95_s": p50 * 1.5, "p99_s": p50 * 2}
        for target, scale in (("direct", 1.0), ("ours", 1.2))
        for depth, p50 in ((10, 0.020 * scale), (40, 0.030 * scale))
    ]
    add_overhead(rows, "direct")
    meta = {"depths": [10, 40], "baseline": "direct"}
    write_overhead(tmp_path, "oh", rows, [], meta, "direct")
    drawn = (tmp_path / "oh.svg").read_text()
    assert "ours: 40: 6" in shown(drawn)[1]  # 36 ms - 30 ms added at p50, depth 40
    result = CliRunner().invoke(app, ["bench", "chart", str(tmp_path / "oh.json")])
    assert result.exit_code == 0, result.output
    assert shown((tmp_path / "oh.svg").read_text()) == shown(drawn)
    (tmp_path / "other.json").write_text('{"unrelated": true}')
    result = CliRunner().invoke(app, ["bench", "chart", str(tmp_path / "other.json")])
    assert result.exit_code == 1
    assert "not the JSON of a bench" in result.output
    assert not (tmp_path / "other.svg").exists()
