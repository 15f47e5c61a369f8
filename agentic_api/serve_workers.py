"""How many HTTP worker processes ``serve`` runs, and why.

``AGENTIC_HTTP_WORKERS=auto`` (the default) runs one worker per CPU this process may use,
up to ``AUTO_MAX_WORKERS``: one event loop is one core, so a single process leaves the
others idle while concurrent turns queue behind each other's CPU work. Below
``AUTO_SEVERAL_FROM_CPUS`` CPUs it runs one: on a small machine the cores are shared with
what the server waits on (the database, often the upstream, the clients), and two workers
on two cores measured a p99 several times one worker's under 32 clients
(docs/benchmarks/workers/). It runs one worker when something can be held by one process
only: a KV-event endpoint the server binds
(``tcp://host:port``, or any ``bind:`` address) accepts one binder, so the other workers
would never follow that replica and answer residency questions from an empty map. An
explicit number is obeyed as given.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from agentic_api.cache.residency.endpoints import Endpoint

# Past this, more processes mostly add memory (each keeps its own caches and database
# pool) and SQLite lock contention; a bigger machine runs more `serve` processes or sets
# the count explicitly.
AUTO_MAX_WORKERS = 8
# Fewer CPUs than this: ``auto`` runs one worker.
AUTO_SEVERAL_FROM_CPUS = 4

# How long uvicorn's supervisor waits for a worker to answer its health check before it
# kills it. A replacement answers only once its interpreter has started and re-imported
# the CLI module (multiprocessing's spawn): measured at load ~6 on 2 CPUs in
# docs/benchmarks/workers/. uvicorn's default (5 s) killed replacements while they booted;
# a worker that hangs for real is found this much later. A worker that dies is replaced at
# once, whatever this says: the supervisor sees its exit (worker_supervisor.py).
WORKER_HEALTHCHECK_SECONDS = 30

_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class WorkerPlan:
    count: int
    # Said in the start-up log line: where the number came from.
    reason: str
    # Explicit counts above 1 with a bound endpoint: only one worker will hold it.
    warning: str | None = None


def available_cpus(cgroup_root: Path = _CGROUP_ROOT) -> int:
    """CPUs this process may run on: its affinity mask (else the machine's count),
    lowered to a cgroup v2 CPU quota when one is set (a container limited to 2 CPUs on a
    64-core host can use 2, whatever its affinity says)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform (macOS)
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root)
    if quota is not None:
        cpus = min(cpus, quota)
    return max(cpus, 1)


def _cgroup_quota(root: Path) -> int | None:
    # cgroup v2: "max 100000" (no limit) or "<quota> <period>" in microseconds.
    try:
        fields = (root / "cpu.max").read_text(encoding="ascii").split()
    except OSError:
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return max(math.ceil(quota / period), 1)


def plan_workers(setting: int | str, endpoints: list[Endpoint], cpus: int) -> WorkerPlan:
    """The worker count for ``AGENTIC_HTTP_WORKERS`` (``auto`` or a positive integer)."""
    bound = [endpoint for endpoint in endpoints if endpoint.mode == "bind"]
    if isinstance(setting, int):
        warning = None
        if setting > 1 and bound:
            warning = (
                f"KV-event endpoint {_describe(bound[0])} is bound by one process only: "
                f"the other {setting - 1} worker(s) keep retrying and track no residency "
                "for it (use ipc:// or connect: endpoints with several workers)"
            )
        return WorkerPlan(setting, "AGENTIC_HTTP_WORKERS / --workers", warning)
    if bound:
        return WorkerPlan(
            1,
            f"auto: KV-event endpoint {_describe(bound[0])} is bound here, and one "
            "process only can hold it",
        )
    if cpus < AUTO_SEVERAL_FROM_CPUS:
        return WorkerPlan(
            1,
            f"auto: {cpus} CPU(s) available, fewer than {AUTO_SEVERAL_FROM_CPUS}: one worker "
            "(the cores are shared with the database, upstream and clients)",
        )
    count = min(cpus, AUTO_MAX_WORKERS)
    capped = f", capped at {AUTO_MAX_WORKERS}" if cpus > AUTO_MAX_WORKERS else ""
    return WorkerPlan(count, f"auto: {cpus} CPU(s) available{capped}")


def _describe(endpoint: Endpoint) -> str:
    return f"{endpoint.replica}={endpoint.address}"
