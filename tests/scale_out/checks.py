"""What the tier shows after the load: every acknowledged turn there and continuable,
model runs per key counted at the tap, background jobs' ends, and the replicas' views
(residency, admin) compared with each other."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI

from tests.scale_out.load import CONTINUABLE, Request

_METRIC = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.e+-]+)$")


@dataclass(frozen=True)
class TapRun:
    gateway: str
    at: float


def tap_runs(tap_log: Path) -> dict[str, list[TapRun]]:
    """Model requests per request tag, as the tap saw them arrive."""
    runs: dict[str, list[TapRun]] = defaultdict(list)
    for line in tap_log.read_text().splitlines():
        entry = json.loads(line)
        if entry["tag"] is not None:
            runs[entry["tag"]].append(TapRun(entry["gateway"], entry["at"]))
    return runs


@dataclass
class RunCount:
    keyed_requests: int = 0
    runs: int = 0
    # Runs after the client knew the key's outcome (its answer; a background job's end):
    # a retry that ran the model again instead of replaying. Must be 0.
    runs_after_acknowledgement: int = 0
    # Runs beyond one that no lost answer explains: more runs than attempts that ended
    # without an answer. Must be 0.
    unexplained_reruns: int = 0
    # Reruns after an attempt whose answer was lost (the gateway died, a 503 said nothing
    # was stored): the first run's turn was never acknowledged, by design it may run again.
    reruns_after_a_lost_answer: int = 0
    rerun_causes: Counter[str] = field(default_factory=Counter)
    keys_never_run: int = 0


def count_runs(requests: Iterable[Request], runs: dict[str, list[TapRun]]) -> RunCount:
    count = RunCount()
    for request in requests:
        count.keyed_requests += 1
        seen = runs.get(request.tag, [])
        count.runs += len(seen)
        if not seen:
            count.keys_never_run += 1
            continue
        # A foreground turn's outcome is its answer; a background job's is its end.
        known = request.settled_at if request.kind == "background" else request.acknowledged_at
        if known is not None:
            count.runs_after_acknowledgement += sum(1 for run in seen if run.at > known)
        lost = [a for a in request.attempts if a.outcome not in ("ok", "replayed")]
        extra = len(seen) - 1
        count.unexplained_reruns += max(0, extra - len(lost))
        count.reruns_after_a_lost_answer += min(extra, len(lost))
        for attempt in lost[:extra]:
            count.rerun_causes[attempt.outcome] += 1
    return count


def ran_on(request: Request, runs: dict[str, list[TapRun]]) -> str | None:
    """The gateway whose model run produced the stored turn: the last one to run it."""
    seen = runs.get(request.tag, [])
    return seen[-1].gateway if seen else None


def background_takeovers(
    jobs: list[Request],
    runs: dict[str, list[TapRun]],
    killed: str,
    recovered_before: dict[str, dict[str, float]],
    recovered_after: dict[str, dict[str, float]],
) -> dict[str, Any]:
    """Acknowledged background jobs: how they ended, which gateway ran them against which
    queued them, and what each gateway's sweep recovered from a dead one's lease."""
    ran_by = {job.tag: ran_on(job, runs) for job in jobs}
    via_killed = [job for job in jobs if job.answered_by == killed]
    return {
        "acknowledged": len(jobs),
        "final_status": dict(sorted(Counter(str(job.status) for job in jobs).items())),
        "enqueued_via_killed_gateway": len(via_killed),
        "enqueued_via_killed_gateway_ran_elsewhere": sum(
            1 for job in via_killed if ran_by[job.tag] not in (None, killed)
        ),
        "ran_on_another_gateway_than_enqueued": sum(
            1 for job in jobs if ran_by[job.tag] not in (None, job.answered_by)
        ),
        "recovered_by_sweep": {
            name: {k: v - recovered_before.get(name, {}).get(k, 0) for k, v in after.items()}
            for name, after in recovered_after.items()
        },
    }


async def retrieve_everywhere(
    requests: list[Request], gateway_urls: dict[str, str], api_key: str
) -> dict[str, Any]:
    """Every acknowledged response read from every gateway directly: the stored status
    must be what the client last saw, and the same on all of them."""
    missing: list[str] = []
    disagreeing: list[str] = []
    wrong_status: list[str] = []
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        semaphore = asyncio.Semaphore(8)

        async def one(request: Request) -> None:
            assert request.response_id is not None
            bodies = []
            async with semaphore:
                for url in gateway_urls.values():
                    answer = await http.get(f"{url}/v1/responses/{request.response_id}")
                    if answer.status_code != 200:
                        missing.append(request.response_id)
                        return
                    bodies.append(answer.json())
            views = {json.dumps([b["status"], b["output"]], sort_keys=True) for b in bodies}
            if len(views) != 1:
                disagreeing.append(request.response_id)
            if bodies[0]["status"] != request.status:
                wrong_status.append(request.response_id)

        acknowledged = [r for r in requests if r.acknowledged]
        await asyncio.gather(*(one(r) for r in acknowledged))
    return {
        "acknowledged": len(acknowledged),
        "missing": missing,
        "disagreeing_between_gateways": disagreeing,
        "status_not_as_answered": wrong_status,
    }


async def continue_each(
    requests: list[Request], url: str, api_key: str, model: str
) -> dict[str, Any]:
    """One more turn from every acknowledged continuable response (``store: false``, so the
    check adds nothing to the chains): its history must rehydrate and the model answer."""
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=3, timeout=120)
    failures: list[str] = []
    semaphore = asyncio.Semaphore(6)

    async def one(response_id: str) -> None:
        async with semaphore:
            try:
                answer = await client.responses.create(
                    model=model,
                    previous_response_id=response_id,
                    input="continue",
                    max_output_tokens=4,
                    store=False,
                )
            except Exception as exc:
                failures.append(f"{response_id}: {exc}")
                return
            if answer.status not in ("completed", "incomplete"):
                failures.append(f"{response_id}: {answer.status}")

    completed = [
        r.response_id
        for r in requests
        if r.acknowledged and r.status in CONTINUABLE and r.response_id
    ]
    try:
        await asyncio.gather(*(one(response_id) for response_id in completed))
    finally:
        await client.close()
    return {"continued": len(completed) - len(failures), "failures": failures}


STORED_AS_FAILED = re.compile(r"Response '(resp_\w+)' failed: .*stored as failed")


def error_claims(requests: list[Request], gateway_url: str, api_key: str) -> dict[str, Any]:
    """Error answers held against what is stored: a 500 that says a response "was stored
    as failed" must name a response that is there, failed; an error with no code is an
    unhandled one (the server had no answer of its own for the failure)."""
    claims = [
        (match.group(1), attempt.outcome)
        for request in requests
        for attempt in request.attempts
        if (match := STORED_AS_FAILED.search(attempt.message))
    ]
    untrue: list[str] = []
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(headers=headers, timeout=30) as http:
        for response_id, outcome in claims:
            answer = http.get(f"{gateway_url}/v1/responses/{response_id}")
            if answer.status_code != 200 or answer.json()["status"] != "failed":
                untrue.append(f"{outcome} {response_id}: stored answers {answer.status_code}")
    unhandled = sum(
        1 for request in requests for attempt in request.attempts if attempt.outcome == "500 -"
    )
    return {"stored_as_failed_claims": len(claims), "untrue": untrue, "unhandled_500s": unhandled}


def comparable_residency(view: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A residency view without what each process makes of its own receipt: the moments
    it received events at, and how removals group into eviction records (one record per
    removal batch as it arrived, so the same evicted blocks can be two records here and
    three there). Per replica: resident blocks and tokens, blocks evicted in all."""
    return sorted(
        (
            replica["replica"],
            replica["resident_blocks"],
            replica["resident_tokens"],
            sum(e["blocks"] for e in replica["evictions"]),
            replica["salt_matches_tenant"],
        )
        for replica in view["replicas"]
    )


def residency_views(
    paths: list[str], gateway_urls: dict[str, str], admin_key: str
) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
    """``/admin/v1/.../residency`` of each path, per gateway."""
    views: dict[str, dict[str, list[tuple[Any, ...]]]] = {name: {} for name in gateway_urls}
    headers = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(headers=headers, timeout=30) as http:
        for name, url in gateway_urls.items():
            for path in paths:
                answer = http.get(f"{url}/admin/v1/{path}/residency")
                answer.raise_for_status()
                views[name][path] = comparable_residency(answer.json())
    return views


def residency_disagreements(
    views: dict[str, dict[str, list[tuple[Any, ...]]]], gateways: Iterable[str]
) -> list[str]:
    names = list(gateways)
    first = views[names[0]]
    return [path for path in first if any(views[other][path] != first[path] for other in names[1:])]


def admin_views(
    paths: list[str], gateway_urls: dict[str, str], admin_key: str
) -> dict[str, list[str]]:
    """Each admin path's JSON from every gateway; paths whose answers differ are listed."""
    differing: list[str] = []
    headers = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(headers=headers, timeout=30) as http:
        for path in paths:
            answers = set()
            for url in gateway_urls.values():
                answer = http.get(f"{url}/admin/v1/{path}")
                answer.raise_for_status()
                answers.add(json.dumps(answer.json(), sort_keys=True))
            if len(answers) != 1:
                differing.append(path)
    return {"compared": paths, "differing": differing}


def scrape(url: str, metric: str) -> dict[str, float]:
    """One counter's values by label set, from a gateway's /metrics."""
    values: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        match = _METRIC.match(line)
        if match and match.group(1) == metric:
            values[match.group(2)] = float(match.group(3))
    return values
