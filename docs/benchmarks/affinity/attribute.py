"""Say which vLLM replica served each request of a ``bench continuations`` run.

vllm-router 0.1.17 passes a worker's response headers back, but our server does not relay
upstream headers to its clients, so ``bench continuations`` through our server cannot see
the serving replica. This script recovers it from the replicas themselves:

- Each replica runs with ``--enable-log-requests --max-log-len 160`` and the logging config
  ``vllm_logging.json`` (vLLM's request logger at DEBUG, everything else at INFO), so every
  request logs ``Request <id> details: prompt: '<|im_start|>system\\n[<nonce>-<pair>] ...``.
  The bench puts a per-pair seed ``[<nonce>-<pair>]`` at the head of the instructions of
  both the cold turn and its continuation, so the replica whose log names a seed served that
  pair's request; the earlier of the two log lines is the cold turn (the bench sends the
  continuation only after the cold turn has completed).
- Per replica, the difference of ``/metrics`` counters before and after the run
  (requests, prompt tokens, prefix-cache queries and hits) cross-checks the per-pair view.

It fills the ``cold_replica``, ``replica`` and ``same_replica`` columns of the bench CSV in
place, fills ``same_replica_pairs`` and ``pairs_with_replica_info`` in the bench JSON's
``summary``, and adds ``run`` (policy, totals) and ``replicas`` (per-replica counters).
Standard library only.

    python attribute.py --csv X.csv --json X.json --work WORKDIR \\
        --replica r1=LOG1 --replica r2=LOG2 --policy consistent_hash --concurrency 1

WORKDIR holds ``<name>.offset`` (the log's size before the run), ``<name>.before.prom`` and
``<name>.after.prom`` (``/metrics`` snapshots), as ``run_affinity.sh`` writes them.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

SEED = re.compile(r"details: prompt: '<\|im_start\|>system\\n\[([0-9a-f]+)-(\d+)\]")
STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) ")
COUNTERS = {
    "requests": "vllm:request_success_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
}


def seen_requests(log: Path, offset: int) -> list[tuple[datetime, str, int]]:
    """(time, nonce, pair) of every request the log recorded after ``offset`` bytes."""
    with log.open("rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", errors="replace")
    found = []
    for line in text.splitlines():
        seed = SEED.search(line)
        stamp = STAMP.match(line)
        if seed and stamp:
            when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
            found.append((when, seed.group(1), int(seed.group(2))))
    return found


def counters(path: Path) -> dict[str, float]:
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        for key, metric in COUNTERS.items():
            if line.startswith(metric + "{") or line.startswith(metric + " "):
                totals[key] += float(line.rsplit(" ", 1)[1])
    return totals


def attribute(
    replicas: dict[str, Path], work: Path
) -> tuple[dict[int, list[tuple[datetime, str]]], dict[str, dict[str, float]]]:
    by_pair: dict[int, list[tuple[datetime, str]]] = {}
    nonces: set[str] = set()
    deltas: dict[str, dict[str, float]] = {}
    for name, log in replicas.items():
        offset = int((work / f"{name}.offset").read_text().strip())
        for when, nonce, pair in seen_requests(log, offset):
            nonces.add(nonce)
            by_pair.setdefault(pair, []).append((when, name))
        before = counters(work / f"{name}.before.prom")
        after = counters(work / f"{name}.after.prom")
        deltas[name] = {key: after[key] - before[key] for key in COUNTERS}
    if len(nonces) > 1:
        raise SystemExit(f"requests of more than one bench run in the logs: {sorted(nonces)}")
    for seen in by_pair.values():
        seen.sort()
    return by_pair, deltas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--replica", action="append", required=True, help="NAME=LOGFILE")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--router", default="vllm-router 0.1.17")
    args = parser.parse_args()

    replicas = dict(item.split("=", 1) for item in args.replica)
    by_pair, deltas = attribute({k: Path(v) for k, v in replicas.items()}, args.work)

    with args.csv.open(newline="", encoding="utf-8") as handle:
        rows: list[dict[str, Any]] = list(csv.DictReader(handle))
    fields = list(rows[0].keys())
    same = 0
    for row in rows:
        seen = by_pair.get(int(row["pair"]), [])
        if len(seen) != 2:
            raise SystemExit(f"pair {row['pair']}: {len(seen)} requests in the logs, expected 2")
        row["cold_replica"], row["replica"] = seen[0][1], seen[1][1]
        row["same_replica"] = row["cold_replica"] == row["replica"]
        same += bool(row["same_replica"])
    with args.csv.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)

    summary = json.loads(args.json.read_text(encoding="utf-8"))
    counts = summary.get("summary", summary)  # the bench nests its figures under "summary"
    counts["same_replica_pairs"] = same
    counts["pairs_with_replica_info"] = len(rows)
    hits_same = [int(r["cached_tokens"]) for r in rows if r["same_replica"]]
    hits_other = [int(r["cached_tokens"]) for r in rows if not r["same_replica"]]
    summary["run"] = {
        "router": args.router,
        "policy": args.policy,
        "concurrency": args.concurrency,
        "replica_source": "vLLM request logs (per-pair seed) + /metrics counter deltas",
        "continuations_with_cache_hits": sum(1 for r in rows if int(r["cached_tokens"]) > 0),
        "cached_tokens_total": sum(int(r["cached_tokens"]) for r in rows),
        "ideal_cached_tokens_total": sum(int(r["ideal_cached_tokens"]) for r in rows),
        "input_tokens_total": sum(int(r["input_tokens"]) for r in rows),
        "cached_tokens_when_same_replica": sorted(set(hits_same)),
        "cached_tokens_when_other_replica": sorted(set(hits_other)),
    }
    summary["replicas"] = {
        name: {
            **{key: int(value) for key, value in delta.items()},
            "cold_turns": sum(1 for r in rows if r["cold_replica"] == name),
            "continuations": sum(1 for r in rows if r["replica"] == name),
        }
        for name, delta in deltas.items()
    }
    args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"same_replica_pairs": same, "pairs": len(rows), **summary["run"]}))


if __name__ == "__main__":
    main()
