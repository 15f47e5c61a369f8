"""Render benchmark of the operator console: how long its pages take for a tenant with
many conversations and a session of many turns, and how many SQL statements each costs.

Seeds a fresh database (SQLite file or a new PostgreSQL database) with one tenant of
``--conversations`` conversations (two turns each, token accounts recording lost tokens)
and one ``--turns``-turn chain, starts ``agentic-api serve`` (one worker) against the
simulator, logs in through the form and GETs each page ``--runs`` times in turn, timing
each request from the client on loopback (an upper bound of the server-side render).
Statement counts come from the server's own ``agentic_db_statements_total`` (/metrics)
read around one more request per page, the background sweep's share subtracted by
reading it again around an idle wait of the same length.

    .venv/bin/python scripts/bench/console_pages.py --backend sqlite
    .venv/bin/python scripts/bench/console_pages.py --backend postgres
    .venv/bin/python scripts/bench/console_pages.py --short   # what CI runs

``--short`` seeds 1,000 conversations and a 100-turn chain and times 3 runs per page:
the same pages and the same printout, small enough for CI to run on every push (2 min
04 s from start to end at load average 34 on the shared 2-core machine, seeding 4.3 s). Its
figures are printed for the record, never compared with a budget (a shared runner's
timings would make such a check fail at random).
Prints a Markdown table (and the machine record) to stdout.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The seeding and process helpers are the test suite's own (one way to write the rows,
# one way to run the server); the script runs from anywhere inside the repository.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx

from agentic_api.storage.migrate import upgrade
from tests.support.console import log_in
from tests.support.console_seed import seed_chain, seed_conversations
from tests.support.databases import create_pg_database, drop_pg_database
from tests.support.processes import Process, process_env
from tests.support.sql import execute
from tests.support.tenants import create_admin_key, create_tenant
from tests.upstream_sim import SimServer


def statements(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    for line in text.splitlines():
        if line.startswith("agentic_db_statements_total "):
            return float(line.split()[1])
    raise RuntimeError("no agentic_db_statements_total in /metrics")


def machine() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return (
        f"commit {commit}; {os.cpu_count()} CPUs ({cpu}); Python {platform.python_version()}; "
        f"load average {load}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--short", action="store_true", help="1,000 conversations, 100 turns, 3 runs (CI)"
    )
    args = parser.parse_args()
    if args.short:
        args.conversations, args.turns, args.runs = 1_000, 100, 3

    work = Path(tempfile.mkdtemp(prefix="console-bench-"))
    pg_name = None
    if args.backend == "postgres":
        pg_name, db_url = create_pg_database()
    else:
        db_url = f"sqlite+aiosqlite:///{work / 'bench.db'}"
    try:
        upgrade(db_url)
        tenant = create_tenant(db_url, "bench")
        began = time.perf_counter()
        seed_conversations(db_url, tenant.id, args.conversations)
        chain = seed_chain(db_url, tenant.id, args.turns)
        seeded = time.perf_counter() - began
        # Planner statistics, as autovacuum (PostgreSQL) or the server's own optimize
        # would have them for a tenant this size; a table seeded a second ago has none.
        execute(db_url, "ANALYZE")
        key = create_admin_key(db_url)
        with SimServer() as sim:
            server = Process.serve(process_env(db_url, sim.url, work / "data", http_workers=1))
            try:
                run(args, server.url, key, tenant.id, chain, seeded)
            finally:
                server.stop()
    finally:
        if pg_name:
            drop_pg_database(pg_name)


def run(
    args: argparse.Namespace, url: str, key: str, tenant_id: str, chain: object, seeded: float
) -> None:
    session_id = chain.session_id  # type: ignore[attr-defined]
    ids: list[str] = chain.response_ids  # type: ignore[attr-defined]
    base = f"/console/tenants/{tenant_id}"
    pages = {
        "tenants list": ("/console", {}),
        f"tenant, {args.conversations:,} conversations (last activity)": (base, {}),
        "tenant, sorted by lost tokens": (base, {"sort": "lost_tokens"}),
        "tenant, filtered (q=conv_01, lossy), page 3": (
            base,
            {"q": "conv_01", "lossy": "1", "page": "3"},
        ),
        f"timeline of the {args.turns}-turn session, first page": (
            f"{base}/timeline",
            {"session": session_id},
        ),
        f"timeline of the {args.turns}-turn session, last page": (
            f"{base}/timeline",
            {"session": session_id, "after": ids[-21]},
        ),
        f"lineage from the root ({args.turns - 1} descendants)": (
            f"/console/responses/{ids[0]}/lineage",
            {},
        ),
        f"lineage of the last turn ({args.turns} ancestors)": (
            f"/console/responses/{ids[-1]}/lineage",
            {},
        ),
        "a response with its items": (f"/console/responses/{ids[-1]}", {}),
        "hit-ratio chart (SVG)": (f"{base}/charts/hit_ratio.svg", {"span": "24h"}),
        "lost-tokens chart (SVG)": (f"{base}/charts/lost.svg", {"span": "24h"}),
    }
    times: dict[str, list[float]] = {name: [] for name in pages}
    with log_in(url, key) as http:
        for name, (path, params) in pages.items():  # warm up each once
            answer = http.get(path, params=params)
            assert answer.status_code == 200, (name, answer.status_code, answer.text[:300])
        for _ in range(args.runs):
            for name, (path, params) in pages.items():
                began = time.perf_counter()
                answer = http.get(path, params=params)
                times[name].append(time.perf_counter() - began)
                assert answer.status_code == 200
        counts: dict[str, int] = {}
        for name, (path, params) in pages.items():
            before = statements(http)
            began = time.perf_counter()
            http.get(path, params=params)
            spent = time.perf_counter() - began
            during = statements(http) - before
            idle_before = statements(http)
            time.sleep(spent)
            idle = statements(http) - idle_before
            counts[name] = int(during - idle)
    print(
        f"Seeded {args.conversations:,} conversations + a {args.turns}-turn chain in {seeded:.1f} s"
    )
    print(f"Backend: {args.backend}; {args.runs} runs per page; {machine()}")
    print()
    print("| page | p50 ms | p95 ms | max ms | SQL statements |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, samples in times.items():
        ordered = sorted(samples)
        p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
        print(
            f"| {name} | {statistics.median(ordered) * 1000:.1f} | {p95 * 1000:.1f} | "
            f"{ordered[-1] * 1000:.1f} | {counts[name]} |"
        )


if __name__ == "__main__":
    main()
