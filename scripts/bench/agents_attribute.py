"""Fill a ``bench agents`` run's replica columns from the replicas' taps, then re-summarize.

Through our server the bench cannot see which replica served a turn; each replica's tap
(``agents_tap.py``) logged every request it passed with the bench tag of the agent and
turn. The last successful request of (run, agent, turn) names the replica of that turn;
the run's CSV, JSON and SVG are rewritten with ``replica``, ``prev_replica`` and
``same_replica`` filled in, so the summary can tell a continuation that moved to another
replica from one that came back to its replica and found its blocks evicted. Also adds
per-replica request counts and checks that the tap saw the same cached tokens as the bench.

    python scripts/bench/agents_attribute.py RUN.json TAP1.jsonl TAP2.jsonl ...
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from agentic_bench.agents import AgentsConfig, summarize
from agentic_bench.agents_report import load_run, write_run


def tap_records(paths: list[Path], run: str) -> dict[tuple[int, int], dict[str, Any]]:
    served: dict[tuple[int, int], dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("run") != run or record.get("status") != 200:
                continue
            key = (int(record["agent"]), int(record["turn"]))
            if key not in served or record["end"] > served[key]["end"]:
                served[key] = record
    return served


def main(argv: list[str]) -> int:
    json_path, taps = Path(argv[0]), [Path(p) for p in argv[1:]]
    result, rows = load_run(json_path)
    settings = {k: v for k, v in result["config"].items() if k in AgentsConfig.__dataclass_fields__}
    config = AgentsConfig(model=result["model"], **settings)
    served = tap_records(taps, config.run_tag)
    mismatched = 0
    previous: dict[int, str | None] = {}
    for row in sorted(rows, key=lambda r: (r["agent"], r["turn"], r["attempt"])):
        if row["status"] == "error":
            continue
        record = served.get((row["agent"], row["turn"]))
        replica = record["replica"] if record else None
        if record and record.get("cached_tokens") != row["cached_tokens"]:
            mismatched += 1
        before = previous.get(row["agent"])
        row["replica"] = replica
        row["prev_replica"] = before
        row["same_replica"] = (replica == before) if replica and before else None
        row["program"] = record.get("program") if record else None
        previous[row["agent"]] = replica
    result["summary"] = summarize(rows, config)
    result["attribution"] = {
        "taps": [str(p) for p in taps],
        "turns_attributed": sum(1 for r in rows if r.get("replica")),
        "turns_per_replica": dict(Counter(r["replica"] for r in rows if r.get("replica"))),
        "cached_tokens_mismatches": mismatched,
        "program_hints_seen": sum(1 for r in rows if r.get("program")),
    }
    write_run(json_path.parent, json_path.stem, rows, result)
    print(
        json.dumps(
            {
                **result["attribution"],
                **{
                    k: result["summary"][k]
                    for k in (
                        "warm_returns",
                        "continuations",
                        "moved_replica",
                        "evicted_while_paused",
                    )
                },
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
