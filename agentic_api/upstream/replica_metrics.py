"""A vLLM replica's load as its own ``/metrics`` reports it: requests waiting for the
scheduler and the share of its KV cache that running requests hold (vLLM counts cached
blocks no request uses as free, so a full prefix cache is not pressure; requests that
need room are)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiohttp

# vLLM's gauge names (v1 engine; ``gpu_cache_usage_perc`` is the older name of the second).
_WAITING = re.compile(r"^vllm:num_requests_waiting(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)
_KV_USAGE = re.compile(r"^vllm:(?:kv|gpu)_cache_usage_perc(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)
PROBE_SECONDS = 2.0


@dataclass(frozen=True)
class ReplicaLoad:
    waiting: float
    # 0..1 (vLLM's "perc" gauges are fractions).
    kv_usage: float


def parse_load(text: str) -> ReplicaLoad | None:
    """The load in a metrics page; None when the page has neither gauge (not a vLLM)."""
    waiting = [float(v) for v in _WAITING.findall(text)]
    usage = [float(v) for v in _KV_USAGE.findall(text)]
    if not waiting and not usage:
        return None
    # Several engines (data parallel) each report theirs: the busiest decides.
    return ReplicaLoad(sum(waiting), max(usage, default=0.0))


async def read_load(session: aiohttp.ClientSession, url: str) -> ReplicaLoad | None:
    """The replica's load, or None when its page cannot be read (the caller treats an
    unreadable replica as under pressure: a re-warm there is no better than a guess)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_SECONDS)) as got:
            if got.status != 200:
                return None
            return parse_load(await got.text())
    except (aiohttp.ClientError, TimeoutError):
        return None
