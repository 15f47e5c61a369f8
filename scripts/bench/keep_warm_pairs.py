"""The keep-warm benchmark's pinned pairs, compared: for each rN, the arm without keep-warm
(``pinned_consistent_hash_rN``) and the one with it (``pinned_keep_warm_rN``; and
``pinned_keep_warm_before_rN``, re-warming shortly before the expected return, where it
ran), which ran the same sessions on the same replicas (``agents_routing.sh``).
Continuations are matched by (agent, turn) across the arms, and split by whether a
keep-warm arm re-warmed the pause before them: the *others* are every continuation no arm
re-warmed, whose hit ratio is what a re-warm may cost (its prefill can evict their blocks).

    python scripts/bench/keep_warm_pairs.py FOLDER > FOLDER/pairs.md

Reads each arm's NAME.csv (rows, with replicas from the taps), NAME.ours.prom (our server's
keep-warm counters: its process ran that arm only) and NAME.rewarms.json (the keep-warm
arm's admin lineage)."""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

Key = tuple[int, int]  # (agent, turn)
ARMS = (
    ("without", "pinned_consistent_hash"),
    ("keep-warm", "pinned_keep_warm"),
    ("keep-warm before return", "pinned_keep_warm_before"),
)


@dataclass(frozen=True)
class Row:
    input_tokens: int
    cached_tokens: int
    expected: int
    warm: bool
    ttft_s: float | None
    replica: str


def rows_of(path: Path) -> dict[Key, Row]:
    """The served attempt of each (agent, turn): the last that did not fail."""
    found: dict[Key, Row] = {}
    with path.open(encoding="utf-8") as handle:
        for raw in csv.DictReader(handle):
            if raw["status"] == "error":
                continue
            found[(int(raw["agent"]), int(raw["turn"]))] = Row(
                input_tokens=int(raw["input_tokens"]),
                cached_tokens=int(raw["cached_tokens"]),
                expected=int(raw["expected_cached_tokens"] or 0),
                warm=raw["warm"] == "True",
                ttft_s=float(raw["ttft_s"]) if raw["ttft_s"] else None,
                replica=raw["replica"],
            )
    return found


def counters(path: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^(agentic_[a-z_]+_total)(\{[^}]*\})? ([0-9.e+]+)$", line)
        if match:
            found[match[1] + (match[2] or "")] = float(match[3])
    return found


def rewarmed(path: Path) -> tuple[set[Key], dict[str, int]]:
    """Continuations whose pause was re-warmed, and the re-warms' outcomes."""
    keys: set[Key] = set()
    outcomes: dict[str, int] = {}
    if not path.exists():
        return keys, outcomes
    for agent, turns in json.loads(path.read_text(encoding="utf-8")).items():
        for turn in turns:
            for record in turn["rewarms"]:
                keys.add((int(agent.removeprefix("a")), turn["turn"] + 1))
                outcomes[record["outcome"]] = outcomes.get(record["outcome"], 0) + 1
    return keys, outcomes


def group(rows: Iterable[Row]) -> str:
    chosen = list(rows)
    if not chosen:
        return "-"
    warm = sum(1 for r in chosen if r.warm)
    ratio = statistics.fmean(r.cached_tokens / r.input_tokens for r in chosen)
    return f"{warm} / {len(chosen)}, {ratio:.3f}"


def ttft(rows: Iterable[Row]) -> str:
    times = sorted(r.ttft_s * 1000 for r in rows if r.ttft_s is not None)
    if not times:
        return "-"
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return f"{statistics.median(times):.0f} / {p95:.0f}"


def placement(rows: dict[Key, Row]) -> str:
    firsts = {agent: row.replica for (agent, turn), row in rows.items() if turn == 1}
    return " ".join(f"a{agent}:{replica}" for agent, replica in sorted(firsts.items()))


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    pairs = sorted(
        path.stem.removeprefix("pinned_consistent_hash_")
        for path in folder.glob("pinned_consistent_hash_r*.csv")
    )
    print(
        "| pair | arm | placement (turn 1) | warm returns, mean hit ratio: all continuations "
        "| re-warmed ones | the others | continuation TTFT p50 / p95 ms "
        "| evicted before resume | re-warms sent: outcomes | re-warm prefill tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, list[Row]] = {}
    spent: dict[str, int] = {}
    for pair in pairs:
        names = {
            arm: f"{prefix}_{pair}"
            for arm, prefix in ARMS
            if (folder / f"{prefix}_{pair}.csv").exists()
        }
        if len(names) < 2:
            continue
        arms = {arm: rows_of(folder / f"{name}.csv") for arm, name in names.items()}
        outcomes: dict[str, dict[str, int]] = {}
        warmed: set[Key] = set()
        for arm, name in names.items():
            keys_warmed, outcomes[arm] = rewarmed(folder / f"{name}.rewarms.json")
            warmed |= keys_warmed
        # Continuations every arm served, with a previous prompt to find cached.
        served = set.intersection(*(set(rows) for rows in arms.values()))
        keys = sorted(
            key
            for key in served
            if key[1] > 1 and all(rows[key].expected for rows in arms.values())
        )
        for arm, name in names.items():
            rows = arms[arm]
            prom = counters(folder / f"{name}.ours.prom")
            evicted = sum(v for k, v in prom.items() if k.startswith("agentic_kv_evicted"))
            sent = "-"
            if arm != "without":
                sent = ", ".join(f"{n} {o}" for o, n in sorted(outcomes[arm].items())) or "none"
            tokens = int(prom.get("agentic_keep_warm_tokens_total", 0))
            spent[arm] = spent.get(arm, 0) + tokens
            print(
                f"| {pair} | {arm} | {placement(rows)} | {group(rows[k] for k in keys)} "
                f"| {group(rows[k] for k in keys if k in warmed)} "
                f"| {group(rows[k] for k in keys if k not in warmed)} "
                f"| {ttft(rows[k] for k in keys)} | {evicted:.0f} | {sent} | {tokens:,} |"
            )
            totals.setdefault(f"{arm} all", []).extend(rows[k] for k in keys)
            totals.setdefault(f"{arm} re-warmed", []).extend(rows[k] for k in keys if k in warmed)
            totals.setdefault(f"{arm} others", []).extend(rows[k] for k in keys if k not in warmed)
    print()
    print("| all pairs | warm returns, mean hit ratio | continuation TTFT p50 / p95 ms |")
    print("|---|---|---|")
    for label, chosen in totals.items():
        print(f"| {label} | {group(chosen)} | {ttft(chosen)} |")
    print()
    for arm, tokens in spent.items():
        print(f"- {arm}: {tokens:,} re-warm prefill tokens over {len(pairs)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
