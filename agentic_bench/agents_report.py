"""``bench agents`` results: writing one run, reading runs back, comparing them.

One run is ``NAME.csv`` (a row per attempted turn), ``NAME.json`` (configuration, machine
and summary) and ``NAME.svg`` (hit ratio and TTFT over the run's time). Several runs — one
per routing policy, say — compare in one table and one chart (``bench agents-report``).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentic_api.charts import line_chart, stack_vertically
from agentic_bench.output import write_csv, write_results

_INTS = (
    "agent",
    "turn",
    "attempt",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "expected_cached_tokens",
    "upper_cached_tokens",
    "tool_calls",
)
_FLOATS = (
    "start_s",
    "end_s",
    "pause_s",
    "hit_ratio",
    "cached_over_expected",
    "ttft_s",
    "latency_s",
)
_BOOLS = ("warm", "same_replica")


_X_TITLE = "seconds since the run started (turn end)"


def _continuations(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["status"] != "error" and r["turn"] > 1]


def _speed(row: dict[str, Any]) -> float:
    """TTFT when the run streamed, else the whole latency (the closest a JSON client sees)."""
    value = row.get("ttft_s")
    return float(value if value is not None else row["latency_s"])


def run_chart(rows: Sequence[dict[str, Any]], title: str) -> str:
    served = [r for r in rows if r["status"] != "error"]
    continuations = _continuations(rows)
    firsts = [r for r in served if r["turn"] == 1]
    streamed = any(r.get("ttft_s") is not None for r in served)
    speed = "TTFT" if streamed else "latency"
    return stack_vertically(
        title,
        [
            line_chart(
                "continuation prefix-cache hit ratio (cached / input tokens)",
                {
                    "hit ratio": [
                        (float(r["end_s"]), float(r["hit_ratio"])) for r in continuations
                    ],
                    "cached / expected": [
                        (float(r["end_s"]), min(float(r["cached_over_expected"]), 1.5))
                        for r in continuations
                        if r.get("cached_over_expected") is not None
                    ],
                },
                x_title=_X_TITLE,
                y_title="ratio",
                y_range=(0.0, 1.5),
            ),
            line_chart(
                f"{speed} per turn",
                {
                    "first turn": [(float(r["end_s"]), _speed(r)) for r in firsts],
                    "continuation": [(float(r["end_s"]), _speed(r)) for r in continuations],
                },
                x_title=_X_TITLE,
                y_title="seconds",
            ),
        ],
    )


def write_run(
    out: Path, name: str, rows: Sequence[dict[str, Any]], result: dict[str, Any]
) -> list[Path]:
    label = result.get("label") or name
    return write_results(out, name, rows, result, run_chart(rows, f"bench agents: {label}"))


def load_rows(path: Path) -> list[dict[str, Any]]:
    """A run's CSV with its numbers and booleans typed again (empty cells are None)."""
    with path.open(encoding="utf-8", newline="") as handle:
        raw = list(csv.DictReader(handle))
    rows: list[dict[str, Any]] = []
    for record in raw:
        row: dict[str, Any] = {}
        for key, value in record.items():
            if value == "":
                row[key] = None
            elif key in _INTS:
                row[key] = int(value)
            elif key in _FLOATS:
                row[key] = float(value)
            elif key in _BOOLS:
                row[key] = value == "True"
            else:
                row[key] = value
        rows.append(row)
    return rows


def load_run(json_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = json.loads(json_path.read_text(encoding="utf-8"))
    return result, load_rows(json_path.with_suffix(".csv"))


def table_row(label: str, summary: dict[str, Any]) -> dict[str, Any]:
    def ms(block: str, q: str) -> float:
        value = (summary.get(block) or {}).get(q)
        return math.nan if value is None else float(value) * 1000

    return {
        "run": label,
        "warm_returns": summary["warm_returns"],
        "continuations": summary["continuations"],
        "mean_hit_ratio": (summary["hit_ratio"] or {}).get("mean"),
        "cached_over_expected": summary["cached_over_expected"],
        "ttft_p50_ms": ms("ttft_continuation_s", "p50"),
        "ttft_p95_ms": ms("ttft_continuation_s", "p95"),
        "latency_p50_ms": ms("latency_continuation_s", "p50"),
        "latency_p95_ms": ms("latency_continuation_s", "p95"),
        "moved_replica": summary.get("moved_replica"),
        "evicted_while_paused": summary.get("evicted_while_paused"),
        "failed_attempts": summary["failed_attempts"],
    }


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"
        return str(value)

    head = (
        "| run | warm returns | mean hit ratio | cached / expected | TTFT p50 / p95 ms | "
        "continuation latency p50 / p95 ms | moved replica | evicted while paused | "
        "failed attempts |"
    )
    lines = [head, "|" + " --- |" * 9]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['warm_returns']} / {r['continuations']} | "
            f"{cell(r['mean_hit_ratio'])} | {cell(r['cached_over_expected'])} | "
            f"{cell(r['ttft_p50_ms'])} / {cell(r['ttft_p95_ms'])} | "
            f"{cell(r['latency_p50_ms'])} / {cell(r['latency_p95_ms'])} | "
            f"{cell(r['moved_replica'])} | {cell(r['evicted_while_paused'])} | "
            f"{cell(r['failed_attempts'])} |"
        )
    return "\n".join(lines) + "\n"


def compare_chart(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], title: str) -> str:
    """Hit ratio and TTFT (latency when not streamed) of every continuation over time,
    one series per run."""
    hit: dict[str, list[tuple[float, float | None]]] = {}
    speed: dict[str, list[tuple[float, float | None]]] = {}
    for label, rows in runs:
        continuations = _continuations(rows)
        hit[label] = [(float(r["end_s"]), float(r["hit_ratio"])) for r in continuations]
        speed[label] = [(float(r["end_s"]), _speed(r)) for r in continuations]
    return stack_vertically(
        title,
        [
            line_chart(
                "continuation hit ratio, per run",
                hit,
                x_title=_X_TITLE,
                y_title="ratio",
                y_range=(0.0, 1.0),
            ),
            line_chart(
                "continuation TTFT (latency when not streamed), per run",
                speed,
                x_title=_X_TITLE,
                y_title="seconds",
            ),
        ],
    )


def write_report(out: Path, name: str, json_paths: Sequence[Path]) -> list[Path]:
    table: list[dict[str, Any]] = []
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    for path in json_paths:
        result, rows = load_run(path)
        label = str(result.get("label") or path.stem)
        table.append(table_row(label, result["summary"]))
        runs.append((label, rows))
    paths = [out / f"{name}.md", out / f"{name}.csv", out / f"{name}.svg"]
    out.mkdir(parents=True, exist_ok=True)
    paths[0].write_text(markdown_table(table), encoding="utf-8")
    write_csv(paths[1], table)
    paths[2].write_text(compare_chart(runs, f"bench agents: {name}"), encoding="utf-8")
    return paths
