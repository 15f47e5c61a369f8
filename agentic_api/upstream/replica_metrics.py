"""A vLLM replica's load as its own ``/metrics`` reports it: requests waiting for the
scheduler and the share of its KV cache that running requests hold (vLLM counts cached
blocks no request uses as free, so a full prefix cache is not pressure; requests that
need room are), and the size of that cache (``cache_config_info``: blocks x block size)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiohttp

# vLLM's gauge names (v1 engine; ``gpu_cache_usage_perc`` is the older name of the second).
_WAITING = re.compile(r"^vllm:num_requests_waiting(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)
_KV_USAGE = re.compile(r"^vllm:(?:kv|gpu)_cache_usage_perc(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)
# An info metric: its labels carry the engine's cache configuration.
_CACHE_CONFIG = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
PROBE_SECONDS = 2.0


@dataclass(frozen=True)
class ReplicaLoad:
    waiting: float
    # 0..1 (vLLM's "perc" gauges are fractions).
    kv_usage: float
    # Tokens the KV cache holds (None when the page does not say).
    kv_capacity_tokens: int | None = None


def parse_load(text: str) -> ReplicaLoad | None:
    """The load in a metrics page; None when the page has neither gauge (not a vLLM)."""
    waiting = [float(v) for v in _WAITING.findall(text)]
    usage = [float(v) for v in _KV_USAGE.findall(text)]
    if not waiting and not usage:
        return None
    # Several engines (data parallel) each report theirs: the busiest decides, and the
    # smallest cache bounds what one session can keep.
    return ReplicaLoad(sum(waiting), max(usage, default=0.0), _capacity(text))


def _capacity(text: str) -> int | None:
    sizes = []
    for labels in _CACHE_CONFIG.findall(text):
        values = dict(_LABEL.findall(labels))
        try:
            sizes.append(int(values["num_gpu_blocks"]) * int(values["block_size"]))
        except (KeyError, ValueError):
            # No block count (not allocated yet): vLLM 0.32 also says it in tokens.
            size = values.get("kv_cache_size_tokens", "")
            if size.isdigit():
                sizes.append(int(size))
    return min(sizes, default=None)


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
