"""Three gateway replicas over one PostgreSQL behind HAProxy, two model replicas behind
vllm-router: load through the balancer, one gateway SIGKILLed (and restarted) and the
database restarted mid-load, then the tally.

Figures go to ``AGENTIC_SCALE_OUT_REPORT`` (a folder) when set: ``scripts/scale_out/run.sh``
writes docs/benchmarks/scale_out/ from them. ``AGENTIC_SCALE_OUT_SECONDS`` (default 60) and
``AGENTIC_SCALE_OUT_CLIENTS`` (default 6) size the load.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.scale_out import checks
from tests.scale_out.haproxy import HAProxy
from tests.scale_out.load import LoadDriver, Request
from tests.scale_out.tier import GATEWAYS, MODEL, Tier
from tests.support.servers import free_port

pytestmark = pytest.mark.scale_out

SECONDS = float(os.environ.get("AGENTIC_SCALE_OUT_SECONDS", "60"))
CLIENTS = int(os.environ.get("AGENTIC_SCALE_OUT_CLIENTS", "6"))
KILLED = "g1"
SURVIVORS = [name for name in GATEWAYS if name != KILLED]


def report(name: str, figures: dict[str, Any]) -> None:
    folder = os.environ.get("AGENTIC_SCALE_OUT_REPORT")
    print(f"\n{name}: {json.dumps(figures, indent=1, default=str)}")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(figures, indent=1, default=str))


async def bench_agents(tier: Tier, out: Path, turns: int) -> asyncio.subprocess.Process:
    """``agentic-api bench agents`` through the balancer: streamed tool loops chained by
    ``previous_response_id``, beside the load driver (the bench retries a failed turn)."""
    command = [
        sys.executable, "-m", "agentic_api.cli", "bench", "agents", "--url", tier.url,
        "--api-key", tier.tenant.api_key, "--model", MODEL, "--agents", "2",
        "--turns", str(turns), "--stream", "--tool-choice", "auto", "--tool-seconds", "1",
        "--system-words", "120", "--task-words", "60", "--tool-output-words", "20",
        "--max-output-tokens", "12", "--retries", "40", "--retry-delay", "1",
        "--replica-header", "x-gateway", "--seed", "1", "--label", "scale_out",
        "--out", str(out), "--name", "bench_agents",
    ]  # fmt: skip
    with (out / "bench_agents.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(*command, stdout=log, stderr=log)


def gateway_urls(tier: Tier) -> dict[str, str]:
    return {name: gateway.url for name, gateway in tier.gateways.items()}


def residency_paths(requests: list[Request], conversations: list[str]) -> list[str]:
    """One per session: a chain's newest acknowledged response, each conversation."""
    newest: dict[tuple[int, str | None], str] = {}
    chains: dict[str, str] = {}
    for request in requests:
        if request.kind == "conversation" or not request.acknowledged or not request.response_id:
            continue
        root = chains.get(request.parent or "", request.response_id)
        chains[request.response_id] = root
        newest[(request.client, root)] = request.response_id
    return [f"responses/{rid}" for rid in newest.values()] + [
        f"conversations/{cid}" for cid in conversations
    ]


def settled_residency(
    tier: Tier, paths: list[str], among: list[str], seconds: float = 20
) -> tuple[list[str], dict[str, Any]]:
    """Views compared until they agree (events reach each process at its own pace) or
    the time is up; the paths that still differ."""
    urls = {name: url for name, url in gateway_urls(tier).items() if name in among}
    deadline = time.monotonic() + seconds
    while True:
        views = checks.residency_views(paths, urls, tier.admin_key)
        differing = checks.residency_disagreements(views, among)
        if not differing or time.monotonic() > deadline:
            return differing, views
        time.sleep(1)


async def probe_sessions(tier: Tier, count: int) -> list[str]:
    """Fresh chains after every gateway is up again, each with its own prompt (no block
    shared with an earlier session, whose stores the restarted gateway never saw)."""
    driver = LoadDriver(tier.url, tier.tenant.api_key, MODEL, seed=99)
    paths = []
    try:
        for index in range(count):
            response = await driver.client.responses.create(
                model=MODEL,
                input=f"probe {index} {time.time_ns()} " + "fresh words " * 40,
                max_output_tokens=8,
            )
            follow = await driver.client.responses.create(
                model=MODEL, previous_response_id=response.id, input="and then", max_output_tokens=8
            )
            paths.append(f"responses/{follow.id}")
    finally:
        await driver.close()
    return paths


async def load_with_faults(
    tier: Tier, driver: LoadDriver, out: Path, timeline: dict[str, float]
) -> int:
    """The keyed driver and bench agents through the balancer for SECONDS; a quarter in, one
    gateway SIGKILLed (and restarted 5 s later); at 60%, PostgreSQL crashed and restarted.
    Returns bench agents' exit status."""
    stop = asyncio.Event()
    start = time.monotonic()
    bench = await bench_agents(tier, out, turns=max(4, int(SECONDS / 4)))
    load = asyncio.create_task(driver.run(CLIENTS, stop))

    async def at(fraction: float) -> None:
        await asyncio.sleep(max(0.0, start + SECONDS * fraction - time.monotonic()))

    async def gateway_fault() -> None:
        await at(0.25)
        timeline["gateway_killed"] = time.monotonic() - start
        await asyncio.to_thread(tier.kill_gateway, KILLED)
        await asyncio.sleep(5)
        await asyncio.to_thread(tier.restart_gateway, KILLED)
        timeline["gateway_back"] = time.monotonic() - start

    async def database_fault() -> None:
        await at(0.6)
        timeline["database_restart_began"] = time.monotonic() - start
        await asyncio.to_thread(tier.postgres.restart)
        timeline["database_back"] = time.monotonic() - start

    faults = asyncio.gather(gateway_fault(), database_fault())
    await at(1.0)
    await faults
    stop.set()
    await load
    timeline["load_ended"] = time.monotonic() - start
    code = await bench.wait()
    timeline["bench_ended"] = time.monotonic() - start
    await driver.close()
    return code


def test_gateway_kill_and_database_restart_lose_nothing(tier: Tier) -> None:
    urls = gateway_urls(tier)
    out = tier.folder / "bench"
    out.mkdir(exist_ok=True)
    driver = LoadDriver(tier.url, tier.tenant.api_key, MODEL, seed=1)
    timeline: dict[str, float] = {}
    recovered_before = {
        n: checks.scrape(u, "agentic_background_recovered_total") for n, u in urls.items()
    }

    started = time.monotonic()
    bench_code = asyncio.run(load_with_faults(tier, driver, out, timeline))
    requests = driver.requests
    runs = checks.tap_runs(tier.tap_log)
    bench_rows = json.loads((out / "bench_agents.json").read_text()) if bench_code == 0 else {}

    retrieved = asyncio.run(checks.retrieve_everywhere(requests, urls, tier.tenant.api_key))
    continued = asyncio.run(checks.continue_each(requests, tier.url, tier.tenant.api_key, MODEL))
    run_count = checks.count_runs(requests, runs)
    claims = checks.error_claims(requests, urls[SURVIVORS[0]], tier.tenant.api_key)

    background = [r for r in requests if r.kind == "background" and r.acknowledged]
    recovered_after = {
        n: checks.scrape(u, "agentic_background_recovered_total") for n, u in urls.items()
    }
    jobs = checks.background_takeovers(background, runs, KILLED, recovered_before, recovered_after)

    probes = asyncio.run(probe_sessions(tier, 3))
    load_paths = residency_paths(requests, driver.conversations)
    survivors_differ, survivor_views = settled_residency(tier, load_paths, SURVIVORS)
    all_differ_probes, probe_views = settled_residency(tier, probes, list(GATEWAYS))
    restarted_differ = checks.residency_disagreements(
        checks.residency_views(load_paths, urls, tier.admin_key), list(GATEWAYS)
    )

    tenant = tier.tenant.id
    admin_paths = [f"tenants/{tenant}", f"tenants/{tenant}/cache_stats",
                   f"tenants/{tenant}/conversations?limit=100"]  # fmt: skip
    admin_paths += [f"responses/{r.response_id}/lineage" for r in background[:5]]
    admin_paths += [
        f"tenants/{tenant}/conversations/{c}/timeline" for c in driver.conversations[:5]
    ]
    admin = checks.admin_views(admin_paths, urls, tier.admin_key)

    errors = Counter(
        a.outcome for r in requests for a in r.attempts if a.outcome not in ("ok", "replayed")
    )
    figures: dict[str, Any] = {
        "upstream": tier.options.upstream,
        "clients": CLIENTS,
        "seconds": SECONDS,
        "timeline_seconds": {k: round(v, 1) for k, v in timeline.items()},
        "wall_seconds": round(time.monotonic() - started, 1),
        "keyed_creates": len(requests),
        "acknowledged": sum(1 for r in requests if r.acknowledged),
        "by_kind": dict(Counter(r.kind for r in requests)),
        "conversations": len(driver.conversations),
        "episodes": driver.episodes,
        "failed_attempts_by_kind": dict(errors),
        "error_messages": sorted(
            {f"{a.outcome}: {a.message}" for r in requests for a in r.attempts if a.message}
        ),
        "unanswered_after_retries": sum(
            1 for r in requests if not r.acknowledged and r.stored_error is None
        ),
        "stored_failure_replayed": sum(1 for r in requests if r.stored_error is not None),
        "deliberate_duplicates": sum(1 for r in requests if r.replay_agreed is not None),
        "deliberate_duplicates_replayed": sum(1 for r in requests if r.replay_agreed),
        "error_answers": claims,
        "retrieval": retrieved,
        "continuation": {
            "continued": continued["continued"],
            "failures": continued["failures"][:10],
        },
        "model_runs": {k: v for k, v in vars(run_count).items()},
        "background": jobs,
        "residency": {
            "load_sessions": len(load_paths),
            "differing_between_survivors": {
                path: {name: survivor_views[name][path] for name in SURVIVORS}
                for path in survivors_differ
            },
            "probe_sessions": len(probes),
            "probe_differing_between_all": all_differ_probes,
            "probe_views": probe_views,
            "load_sessions_the_restarted_gateway_sees_otherwise": len(restarted_differ),
        },
        "admin": admin,
        "bench_agents_exit": bench_code,
        "bench_agents_summary": bench_rows.get("summary") if isinstance(bench_rows, dict) else None,
    }
    report("faults", figures)

    assert bench_code == 0, (out / "bench_agents.log").read_text()[-3000:]
    assert retrieved["missing"] == [] and retrieved["disagreeing_between_gateways"] == []
    assert retrieved["status_not_as_answered"] == []
    assert continued["failures"] == []
    assert run_count.runs_after_acknowledgement == 0
    assert run_count.unexplained_reruns == 0
    assert figures["deliberate_duplicates"] == figures["deliberate_duplicates_replayed"]
    assert all(r.status is not None for r in background), "a background job never ended"
    assert survivors_differ == [], figures["residency"]["differing_between_survivors"]
    assert all_differ_probes == []
    assert admin["differing"] == []
    # Last, so that everything above is shown first: what the error answers said.
    assert claims["untrue"] == [], claims
    assert claims["unhandled_500s"] == 0, figures["error_messages"]


def affinity_run(tier: Tier, affinity: bool, seconds: float) -> dict[str, Any]:
    """Load without faults through a balancer with or without affinity; the history
    lookups (a hit: the parent's history verified in this process; a miss: read from the
    database) summed over the gateways."""
    urls = gateway_urls(tier)
    before = {n: checks.scrape(u, "agentic_history_cache_lookups_total") for n, u in urls.items()}
    balancer = HAProxy(
        tier.folder / ("affinity" if affinity else "round-robin"),
        free_port(),
        {n: g.port for n, g in tier.gateways.items()},
        affinity=affinity,
    )
    try:
        driver = LoadDriver(balancer.url, tier.tenant.api_key, MODEL, seed=7, affinity=affinity)

        async def run() -> None:
            stop = asyncio.Event()
            load = asyncio.create_task(driver.run(CLIENTS, stop))
            await asyncio.sleep(seconds)
            stop.set()
            await load
            await driver.close()

        asyncio.run(run())
    finally:
        balancer.stop()
    after = {n: checks.scrape(u, "agentic_history_cache_lookups_total") for n, u in urls.items()}
    lookups = {
        result: sum(
            after[n].get(f'result="{result}"', 0) - before[n].get(f'result="{result}"', 0)
            for n in urls
        )
        for result in ("hit", "miss")
    }
    served = Counter(r.answered_by for r in driver.requests if r.acknowledged)
    return {
        "affinity": affinity,
        "acknowledged": sum(1 for r in driver.requests if r.acknowledged),
        "unanswered": sum(1 for r in driver.requests if not r.acknowledged),
        "served_by": dict(served),
        "history_lookups": lookups,
        "history_read_from_database_share": round(
            lookups["miss"] / max(1, sum(lookups.values())), 3
        ),
    }


def test_session_affinity_keeps_histories_in_process(tier: Tier) -> None:
    seconds = max(15.0, SECONDS / 3)
    figures: dict[str, Any] = {
        "seconds_each": seconds,
        "round_robin": affinity_run(tier, False, seconds),
        "affinity": affinity_run(tier, True, seconds),
    }
    report("affinity", figures)
    assert figures["round_robin"]["unanswered"] == 0 and figures["affinity"]["unanswered"] == 0
    # With affinity a chain stays on one gateway, whose cache holds its verified history.
    assert (
        figures["affinity"]["history_read_from_database_share"]
        < figures["round_robin"]["history_read_from_database_share"]
    )
