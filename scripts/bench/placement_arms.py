"""The placement benchmark's pinned arms, pooled over their pairs: every ``NAME_rN`` of one
``scripts/bench/agents_routing.sh`` folder (``pinned_consistent_hash``, ``pinned_keep_warm``,
``pinned_gateway``, ``pinned_gateway_keep_warm``) taken together, so that a comparison
rests on every pair's continuations, not on one pair's ten (whose p95 is nearly their
maximum). Same definitions as ``bench agents`` (``agentic_bench/agents.py:summarize``):
warm returns, cached / expected, continuation TTFT; plus the largest share of one
replica's requests against its fair share (1.0: even), worst pair first.

    python scripts/bench/placement_arms.py FOLDER > FOLDER/arms.md
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from agentic_bench.agents import AgentsConfig, summarize
from agentic_bench.agents_report import load_run

ARMS = ("pinned_consistent_hash", "pinned_keep_warm", "pinned_gateway", "pinned_gateway_keep_warm")
PAIR = re.compile(r"^(?P<arm>.+)_r(?P<pair>\d+)$")


def fair_share(rows: list[dict[str, Any]], replicas: int = 2) -> float:
    """The busiest replica's requests against an even split (1.0: even)."""
    counts = Counter(str(r["replica"]) for r in rows if r.get("replica"))
    total = sum(counts.values())
    return max(counts.values()) / (total / replicas) if total else float("nan")


def main(folder: Path) -> str:
    pooled: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    shares: defaultdict[str, list[float]] = defaultdict(list)
    configs: dict[str, AgentsConfig] = {}
    for path in sorted(folder.glob("pinned_*_r*.json")):
        match = PAIR.match(path.stem)
        if match is None or match["arm"] not in ARMS:
            continue
        result, rows = load_run(path)
        fields = AgentsConfig.__dataclass_fields__
        settings = {k: v for k, v in result["config"].items() if k in fields}
        configs[match["arm"]] = AgentsConfig(model=result["model"], **settings)
        pooled[match["arm"]].extend(rows)
        shares[match["arm"]].append(fair_share(rows))
    lines = [
        "| arm | pairs | warm returns | cached / expected | continuation TTFT p50 / p95 ms "
        "| busiest replica / fair share (worst pair) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm in ARMS:
        if arm not in pooled:
            continue
        s = summarize(pooled[arm], configs[arm])
        ttft = s["ttft_continuation_s"]
        lines.append(
            f"| {arm} | {len(shares[arm])} | {s['warm_returns']} / {s['continuations']} "
            f"| {s['cached_over_expected']:.3f} | {ttft['p50'] * 1000:.0f} / "
            f"{ttft['p95'] * 1000:.0f} | {max(shares[arm]):.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1])))
