"""What a continuation's history read costs on a worker that did not commit its parent:
the whole chain read and verified (``load_history``, what every such turn did before) and
only the parent's turn read after its kept parent, verified by extending that turn's
digest (``load_history_since``, what it does now when that turn is kept in the process).

It builds one ``previous_response_id`` chain through two servers of ours over one database,
taking turns (as two ``serve`` workers do when a client's requests alternate between
them), against the simulator; then, at each depth asked for, times both reads of the turn
there (its parent's history as a continuation would load it), in this process on the same
database, and prints the median of the repeats and the items each read.

    PYTHONPATH=. .venv/bin/python scripts/bench/history_since.py [--backend sqlite|postgres]
        [--depths 10,40,200,1000] [--repeat 30] [--out FILE.json]

Needs PostgreSQL on 127.0.0.1:5432 for ``--backend postgres`` (a database of its own is
created and dropped). Not a test: figures go in docs/benchmarks/workers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from agentic_api.app import create_app
from agentic_api.storage.database import Database
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.verified_histories import KeptAncestor
from agentic_api.turns.prepare.history import load_history, load_history_since
from tests.conftest import make_database, server_settings
from tests.support.databases import drop_pg_database
from tests.support.servers import ThreadedServer
from tests.support.tenants import create_tenant
from tests.upstream_sim.server import SimServer


def build_chain(db_url: str, sim_url: str, folder: Path, depth: int) -> tuple[str, list[str]]:
    """A tenant and its chain of ``depth + 1`` turns, each made by the other server than
    its parent."""
    tenant = create_tenant(db_url)
    servers = [
        ThreadedServer(create_app(server_settings(db_url, sim_url, folder / name))).start()
        for name in ("a", "b")
    ]
    ids: list[str] = []
    try:
        clients = [
            httpx.Client(
                base_url=server.url,
                headers={"Authorization": f"Bearer {tenant.api_key}"},
                timeout=60,
            )
            for server in servers
        ]
        for turn in range(depth + 1):
            body: dict[str, Any] = {"model": "sim-model", "input": f"turn {turn}"}
            if ids:
                body["previous_response_id"] = ids[-1]
            answer = clients[turn % 2].post("/v1/responses", json=body)
            answer.raise_for_status()
            ids.append(answer.json()["id"])
        for client in clients:
            client.close()
    finally:
        for server in servers:
            server.stop()
    return tenant.id, ids


async def time_reads(
    db_url: str, tenant_id: str, ids: list[str], depth: int, repeat: int
) -> dict[str, Any]:
    db = Database.from_url(db_url, pool_size=1)
    try:
        async with db.read() as session:
            repo = ResponseRepository(session)
            parent = await repo.get_any(tenant_id, ids[depth])
            grandparent = await repo.get_any(tenant_id, ids[depth - 1])
            assert parent is not None and grandparent is not None
            kept = await load_history(repo, grandparent)
            ancestor = KeptAncestor(grandparent.id, str(grandparent.prefix_digest), tuple(kept))
            whole_ms, since_ms = [], []
            for _ in range(repeat):
                started = time.perf_counter()
                whole = await load_history(repo, parent)
                whole_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                since, extended = await load_history_since(repo, parent, ancestor)
                since_ms.append((time.perf_counter() - started) * 1000)
                assert extended and [i.data for i in since] == [i.data for i in whole]
    finally:
        await db.close()
    return {
        "depth": depth,
        "history_items": len(whole),
        "whole_chain_ms_p50": round(statistics.median(whole_ms), 3),
        "since_kept_parent_ms_p50": round(statistics.median(since_ms), 3),
        "items_read_whole": len(whole),
        "items_read_since": len(whole) - len(kept),
    }


async def analyze(db_url: str) -> None:
    db = Database.from_url(db_url, pool_size=1)
    try:
        async with db.write() as session:
            await session.execute(text("ANALYZE"))
    finally:
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--depths", default="10,40,200,1000")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    depths = sorted(int(d) for d in args.depths.split(","))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, SimServer() as sim:
        folder = Path(tmp)
        db_url, pg_name = make_database(args.backend, folder)
        try:
            tenant_id, ids = build_chain(db_url, sim.url, folder, depths[-1])
            if pg_name:
                # As autovacuum would soon after: on a table it has not analyzed yet,
                # PostgreSQL walks the chain through the tenant index (every step reading
                # all of the tenant's rows: 270 ms at depth 1,000 instead of 11).
                asyncio.run(analyze(db_url))
            rows = [asyncio.run(time_reads(db_url, tenant_id, ids, d, args.repeat)) for d in depths]
        finally:
            if pg_name:
                drop_pg_database(pg_name)
    result = {
        "command": "scripts/bench/history_since.py "
        f"--backend {args.backend} --depths {args.depths} --repeat {args.repeat}",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "backend": args.backend,
        "rows": rows,
    }
    for row in rows:
        print(
            f"{args.backend} depth {row['depth']:>5}: "
            f"whole chain {row['whole_chain_ms_p50']:8.2f} ms"
            f" ({row['items_read_whole']} items)  since the kept parent"
            f" {row['since_kept_parent_ms_p50']:6.2f} ms ({row['items_read_since']} items)"
        )
    print(
        f"load average before {result['load_average_before']}, after {result['load_average_after']}"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
