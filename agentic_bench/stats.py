"""Small, exact statistics for benchmark reports (no numpy)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between closest ranks."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError("q must be within [0, 100]")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def summary(values: Sequence[float]) -> dict[str, float]:
    """Count, mean and the percentiles benchmarks report."""
    if not values:
        return {"n": 0, "mean": math.nan, "p50": math.nan, "p95": math.nan, "p99": math.nan}
    return {
        "n": len(values),
        "mean": sum(values) / len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
    }


def full_blocks(tokens: int, block_size: int) -> int:
    """Tokens in the full blocks of a sequence of ``tokens`` tokens."""
    return max(0, tokens // block_size) * block_size


def ideal_cached(previous_prompt: int, prompt: int, block_size: int) -> int:
    """The block-aligned maximum reuse of a continuation whose prefix is exactly the
    previous turn's prompt: every full block of that prompt, capped by what the engine
    can reuse of this prompt (vLLM always recomputes the last prompt token)."""
    return min(full_blocks(previous_prompt, block_size), full_blocks(prompt - 1, block_size))


def upper_cached(previous_prompt: int, previous_output: int, prompt: int, block_size: int) -> int:
    """Reuse if the previous turn's generated tokens also survive re-tokenization of its
    text (its last generated token was never fed back, so it has no KV)."""
    computed = previous_prompt + max(previous_output - 1, 0)
    return min(full_blocks(computed, block_size), full_blocks(prompt - 1, block_size))


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan
