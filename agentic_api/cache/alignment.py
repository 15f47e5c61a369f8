"""Where two token sequences part, and whether they meet again.

A continuation's prompt should begin with its parent's prompt and output, token for
token. When it does not, the shape of the difference says why: a re-tokenized text
splits a few tokens differently and then agrees again (the parent's tokens all
reappear, shifted), while a template that drops or rewrites content leaves parent
tokens that never reappear.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

# How far (in tokens, on each side) a re-split may reach before we call it a rewrite,
# and how many tokens must agree again to count as meeting again.
RESYNC_WINDOW = 8
RESYNC_RUN = 4
# Divergences followed before giving up on the rest of the parent.
MAX_SPLITS = 64


def common_prefix(a: array[int], b: array[int]) -> int:
    """Length of the longest common prefix, by binary search over byte slices (each
    comparison a memcmp), so long prompts cost microseconds, not a Python loop."""
    left, right = 0, min(len(a), len(b))
    raw_a, raw_b = a.tobytes(), b.tobytes()
    size = a.itemsize
    if raw_a[: right * size] == raw_b[: right * size]:
        return right
    # Invariant: the first ``left`` agree, the first ``right`` do not.
    while right - left > 1:
        middle = (left + right) // 2
        if raw_a[: middle * size] == raw_b[: middle * size]:
            left = middle
        else:
            right = middle
    return left


@dataclass(frozen=True)
class Split:
    """One place where the child's tokens differ from the parent's: ``parent`` tokens
    (from ``offset`` in the parent) became ``child`` tokens (from ``child_offset``)."""

    offset: int
    child_offset: int
    parent: tuple[int, ...]
    child: tuple[int, ...]
    # The sequences agreed again right after (False: they did not within the window).
    resynced: bool


@dataclass(frozen=True)
class Alignment:
    """How the child covers the parent from the first divergence on."""

    splits: tuple[Split, ...]
    # Every parent token reappears in the child, in order, apart from local re-splits
    # that replaced at least one token by at least one other.
    realigned: bool


def align(parent: array[int], child: array[int], start: int) -> Alignment:
    """Follows ``parent`` through ``child`` from the divergence at ``start``."""
    splits: list[Split] = []
    p, c = start, start
    while p < len(parent) and len(splits) < MAX_SPLITS:
        found = _resync(parent, child, p, c)
        if found is None:
            splits.append(
                Split(
                    p,
                    c,
                    tuple(parent[p : p + RESYNC_WINDOW]),
                    tuple(child[c : c + RESYNC_WINDOW]),
                    resynced=False,
                )
            )
            return Alignment(tuple(splits), realigned=False)
        skip_p, skip_c = found
        splits.append(
            Split(p, c, tuple(parent[p : p + skip_p]), tuple(child[c : c + skip_c]), True)
        )
        if skip_p == 0 or skip_c == 0:
            # Tokens only dropped or only inserted: content, not a different split of it.
            return Alignment(tuple(splits), realigned=False)
        p, c = p + skip_p, c + skip_c
        agreed = common_prefix(parent[p:], child[c:])
        p, c = p + agreed, c + agreed
    return Alignment(tuple(splits), realigned=p >= len(parent))


def _resync(parent: array[int], child: array[int], p: int, c: int) -> tuple[int, int] | None:
    """The smallest (by total) skips after which ``parent[p:]`` and ``child[c:]`` agree
    for ``RESYNC_RUN`` tokens (or up to the parent's end), or None."""
    best: tuple[int, int] | None = None
    for total in range(1, 2 * RESYNC_WINDOW + 1):
        for skip_p in range(max(0, total - RESYNC_WINDOW), min(total, RESYNC_WINDOW) + 1):
            skip_c = total - skip_p
            run = min(RESYNC_RUN, len(parent) - (p + skip_p))
            if run <= 0:
                continue
            if parent[p + skip_p : p + skip_p + run] == child[c + skip_c : c + skip_c + run]:
                best = (skip_p, skip_c)
                break
        if best is not None:
            return best
    return None
