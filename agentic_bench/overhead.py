"""``bench overhead``: what a stateful Responses server adds to each turn, versus depth.

The same multi-turn workload goes to every target: directly to the upstream (the client
carries the whole history, ``store: false``) and through one or more Responses servers
(``previous_response_id``; the server rehydrates). For each depth D a chain of D-1 turns is
built on every target, then ``probes`` forks of it (turns at depth D, sharing that exact
history) are sent in batches of ``concurrency``, the targets taking turns batch by batch
(in a rotating order), so that whatever else the machine is doing meanwhile falls on all
of them alike rather than on whichever ran during a noisy second. Reported per target and
depth: latency p50/p95/p99 of the probes, the added latency versus the direct run at the
same depth, turns/s over the target's own batches, where the target exposes our
``/metrics``, SQL statements per turn, and, for a local target given its server's pid, the
server's CPU per turn (read around that target's own batches only).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_api.charts import line_chart, stack_vertically
from agentic_bench.client import (
    BenchError,
    Target,
    TurnResult,
    filler_text,
    message,
    replayable,
)
from agentic_bench.output import write_results
from agentic_bench.process_cpu import CpuMeter
from agentic_bench.stats import summary

STATEMENTS_METRIC = "agentic_db_statements_total"


@dataclass(frozen=True)
class OverheadConfig:
    model: str
    depths: Sequence[int] = (10, 40, 200)
    probes: int = 30
    concurrency: int = 4
    turn_words: int = 12
    max_output_tokens: int = 8
    temperature: float = 0.0
    cache_salt: str = "bench-overhead"
    warmup: int = 3


@dataclass
class Chain:
    """The head of a built chain: a response id (stateful) or the carried history."""

    last_id: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def _body(config: OverheadConfig, target: Target, chain: Chain, text: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": config.model,
        "max_output_tokens": config.max_output_tokens,
        "temperature": config.temperature,
    }
    new = message("user", text)
    if target.stateful:
        body["input"] = [new]
        if chain.last_id:
            body["previous_response_id"] = chain.last_id
    else:
        body["store"] = False
        body["cache_salt"] = config.cache_salt
        body["input"] = [*chain.history, new]
    return body


async def turn(
    target: Target, config: OverheadConfig, chain: Chain, text: str, session: str
) -> TurnResult:
    headers = None if target.stateful else {"x-session-id": session}
    return await target.create(_body(config, target, chain, text), headers)


async def build_chain(
    target: Target, config: OverheadConfig, turns: int, seed: str
) -> tuple[Chain, list[dict[str, Any]]]:
    chain = Chain()
    rows: list[dict[str, Any]] = []
    for index in range(turns):
        text = filler_text(config.turn_words, f"{seed}-{index}")
        result = await turn(target, config, chain, text, seed)
        if target.stateful:
            chain.last_id = result.id
        else:
            chain.history += [message("user", text), *replayable(result.output)]
        rows.append(
            {
                "target": target.name,
                "turn_depth": index + 1,
                "latency_s": result.latency,
                "input_tokens": result.input_tokens,
                "cached_tokens": result.cached_tokens,
            }
        )
    return chain, rows


@dataclass
class Probes:
    """One target's probe phase at one depth."""

    target: Target
    chain: Chain
    seed: str
    results: list[TurnResult] = field(default_factory=list)
    wall_s: float = 0.0


async def probe_interleaved(
    phases: Sequence[Probes], config: OverheadConfig, meter: CpuMeter | None = None
) -> None:
    """Sends every target its probes, a batch of ``concurrency`` at a time, the targets
    taking turns batch by batch in a rotating order; ``meter`` counts each target's
    server CPU during its own batches."""
    size = max(1, config.concurrency)
    for batch, first in enumerate(range(0, config.probes, size)):
        indices = range(first, min(first + size, config.probes))
        rotation = batch % len(phases)
        for phase in [*phases[rotation:], *phases[:rotation]]:
            if meter is not None:
                meter.start(phase.target.name)
            started = time.perf_counter()
            phase.results += await asyncio.gather(
                *(
                    turn(
                        phase.target,
                        config,
                        phase.chain,
                        filler_text(config.turn_words, f"{phase.seed}-probe-{index}"),
                        phase.seed,
                    )
                    for index in indices
                )
            )
            phase.wall_s += time.perf_counter() - started
            if meter is not None:
                meter.stop(phase.target.name)


async def statements(target: Target) -> float | None:
    """Our server's SQL statement counter, when the target exposes it."""
    if not target.stateful:
        return None
    try:
        response = await target.http.get("/metrics")
    except Exception:
        return None
    if response.status_code != 200:
        return None
    for line in response.text.splitlines():
        if line.startswith(STATEMENTS_METRIC + " "):
            return float(line.split()[1])
    return None


async def run_overhead(
    targets: Sequence[Target],
    config: OverheadConfig,
    baseline: str,
    pids: Mapping[str, int] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Returns (one row per target and depth, one row per chain-building turn).
    ``pids``: target name -> its server's pid, for the server's CPU per turn."""
    if baseline not in {t.name for t in targets}:
        raise BenchError(f"baseline target {baseline!r} is not among the targets")
    unknown = set(pids or {}) - {t.name for t in targets}
    if unknown:
        raise BenchError(f"--pid for unknown targets: {sorted(unknown)}")
    nonce = uuid.uuid4().hex[:8]
    for target in targets:
        warm_chain = Chain()
        for index in range(config.warmup):
            await turn(target, config, warm_chain, f"warm-up {nonce} {index}", f"warm-{nonce}")
    rows: list[dict[str, Any]] = []
    chain_rows: list[dict[str, Any]] = []
    for depth in config.depths:
        phases: list[Probes] = []
        for target in targets:
            seed = f"{nonce}-{target.name}-{depth}"
            chain, built = await build_chain(target, config, depth - 1, seed)
            for row in built:
                row["chain_depth"] = depth
            chain_rows += built
            phases.append(Probes(target, chain, seed))
        before = [await statements(phase.target) for phase in phases]
        meter = CpuMeter(dict(pids or {}))
        await probe_interleaved(phases, config, meter)
        for phase, counted in zip(phases, before, strict=True):
            after = await statements(phase.target)
            results, wall = phase.results, phase.wall_s
            cpu = meter.total(phase.target.name)
            latencies = summary([r.latency for r in results])
            rows.append(
                {
                    "target": phase.target.name,
                    "depth": depth,
                    "probes": len(results),
                    "concurrency": config.concurrency,
                    "p50_s": latencies["p50"],
                    "p95_s": latencies["p95"],
                    "p99_s": latencies["p99"],
                    "mean_s": latencies["mean"],
                    "turns_per_s": len(results) / wall if wall else float("nan"),
                    "input_tokens_mean": sum(r.input_tokens for r in results) / len(results),
                    "cached_tokens_mean": sum(r.cached_tokens for r in results) / len(results),
                    "sql_statements_per_turn": (
                        (after - counted) / len(results)
                        if counted is not None and after is not None
                        else None
                    ),
                    "server_cpu_ms_per_turn": (
                        cpu * 1000 / len(results) if cpu is not None and results else None
                    ),
                }
            )
    add_overhead(rows, baseline)
    return rows, chain_rows


def add_overhead(rows: list[dict[str, Any]], baseline: str) -> None:
    """Adds ``added_pXX_ms``: the target's percentile minus the baseline's, same depth."""
    base = {row["depth"]: row for row in rows if row["target"] == baseline}
    for row in rows:
        reference = base.get(row["depth"])
        for q in ("p50", "p95", "p99"):
            row[f"added_{q}_ms"] = (
                (row[f"{q}_s"] - reference[f"{q}_s"]) * 1000 if reference is not None else None
            )


def chart(rows: Sequence[dict[str, Any]], baseline: str, title: str) -> str:
    """p50 per target over depth, then what each adds to the baseline at p50 and p95 (the
    baseline's own line is 0 there: it keeps each target's colour in every panel)."""
    names = list(dict.fromkeys(str(r["target"]) for r in rows))

    def series(key: str, scale: float = 1.0) -> dict[str, list[tuple[float, float | None]]]:
        return {
            name: [
                (float(r["depth"]), float(r[key]) * scale)
                for r in rows
                if r["target"] == name and r.get(key) is not None
            ]
            for name in names
        }

    x_title = "depth (turns in the chain, including the measured one)"
    return stack_vertically(
        title,
        [
            line_chart(
                "p50 latency per turn", series("p50_s", 1000), x_title=x_title, y_title="ms"
            ),
            *(
                line_chart(
                    f"added {q} latency per turn vs {baseline}",
                    series(f"added_{q}_ms"),
                    x_title=x_title,
                    y_title="ms",
                    from_zero=False,
                )
                for q in ("p50", "p95")
            ),
        ],
    )


def write_outputs(
    out: Path,
    name: str,
    rows: Sequence[dict[str, Any]],
    chain_rows: Sequence[dict[str, Any]],
    meta: dict[str, Any],
    baseline: str,
) -> list[Path]:
    return write_results(
        out,
        name,
        rows,
        {**meta, "results": list(rows)},
        chart(rows, baseline, f"bench overhead: {name}"),
        more_rows={"chains": chain_rows},
    )
