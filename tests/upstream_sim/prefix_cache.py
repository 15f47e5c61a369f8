"""A model of vLLM's automatic prefix cache, at block granularity.

vLLM hashes every *full* block of token ids as a chain (each block's hash covers its
parent's hash), salts the first block with ``cache_salt``, and on a new request reuses
the longest run of leading blocks whose hashes it still holds. It always recomputes
at least the last prompt token (it needs that token's logits), so a prompt that is
entirely cached still reports one block less than its length when the length is a
multiple of the block size. This class reproduces exactly those observable numbers.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from .kv_events import CLEARED, block_hash, removed, stored

# The cache is keyed by (salt, block hash): the salt is both mixed into the chain root
# and kept in the key so that per-salt statistics are cheap.
_Key = tuple[str | None, bytes]


def _root(salt: str | None) -> bytes:
    seed = b"\x00nosalt" if salt is None else b"\x01" + salt.encode("utf-8")
    return hashlib.blake2b(seed, digest_size=16).digest()


def block_hashes(tokens: Sequence[int], block_size: int, salt: str | None) -> Iterator[bytes]:
    """The hash chain of the full blocks of ``tokens`` (a trailing partial block has none)."""
    parent = _root(salt)
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = array("Q", tokens[start : start + block_size]).tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=16).digest()
        yield parent


class PrefixCache:
    """Not thread-safe by itself: the simulator calls it under its state lock."""

    def __init__(self, block_size: int = 16, capacity_blocks: int | None = None) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[_Key, None] = OrderedDict()
        self.hits = 0
        self.queries = 0
        # When a list, the KV events vLLM would publish for each change are appended to it
        # (the simulator's state drains it into its publisher).
        self.journal: list[dict[str, Any]] | None = None

    def lookup(
        self,
        tokens: Sequence[int],
        salt: str | None,
        *,
        session_id: str | None = None,
        report_reuse: bool = False,
    ) -> int:
        """Cached prompt tokens for a new request: leading cached full blocks, capped.
        ``report_reuse`` (vLLM's ``kv_cache_report_mode: full``) journals the reused
        blocks as stored under ``session_id``."""
        self.queries += 1
        matched: list[bytes] = []
        for digest in block_hashes(tokens, self.block_size, salt):
            key = (salt, digest)
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            matched.append(digest)
        cap = max(0, (len(tokens) - 1) // self.block_size) * self.block_size
        cached = min(len(matched) * self.block_size, cap)
        if cached:
            self.hits += 1
            if report_reuse and self.journal is not None:
                reused = matched[: cached // self.block_size]
                self.journal.append(
                    stored(
                        [block_hash(d) for d in reused],
                        None,
                        list(tokens[:cached]),
                        self.block_size,
                        salt,
                        session_id,
                    )
                )
        return cached

    def insert(
        self, tokens: Sequence[int], salt: str | None, *, session_id: str | None = None
    ) -> int:
        """Remember every full block of ``tokens``; returns the number of blocks now held."""
        run: list[int] = []
        run_start = 0
        run_parent: int | None = None
        parent: int | None = None
        for index, digest in enumerate(block_hashes(tokens, self.block_size, salt)):
            key = (salt, digest)
            new = key not in self._blocks
            self._blocks[key] = None
            self._blocks.move_to_end(key)
            if new and not run:
                run_start, run_parent = index, parent
            if new:
                run.append(block_hash(digest))
            elif run:
                self._journal_stored(run, run_parent, tokens, run_start, salt, session_id)
                run = []
            parent = block_hash(digest)
        if run:
            self._journal_stored(run, run_parent, tokens, run_start, salt, session_id)
        if self.capacity_blocks is not None:
            while len(self._blocks) > self.capacity_blocks:
                (_salt, digest), _ = self._blocks.popitem(last=False)
                if self.journal is not None:
                    self.journal.append(removed(block_hash(digest)))
        return len(self._blocks)

    def _journal_stored(
        self,
        run: list[int],
        parent: int | None,
        tokens: Sequence[int],
        first_block: int,
        salt: str | None,
        session_id: str | None,
    ) -> None:
        if self.journal is None:
            return
        start = first_block * self.block_size
        ids = list(tokens[start : start + len(run) * self.block_size])
        self.journal.append(stored(list(run), parent, ids, self.block_size, salt, session_id))

    def contains_prefix(self, tokens: Sequence[int], salt: str | None) -> int:
        """How many leading full blocks are held, without touching LRU order or stats."""
        held = 0
        for digest in block_hashes(tokens, self.block_size, salt):
            if (salt, digest) not in self._blocks:
                break
            held += 1
        return held

    def block_count(self) -> int:
        return len(self._blocks)

    def salt_block_count(self, salt: str | None) -> int:
        return sum(1 for s, _ in self._blocks if s == salt)

    def clear(self) -> None:
        if self.journal is not None:
            self.journal.append(CLEARED)
        self._blocks.clear()
        self.hits = 0
        self.queries = 0
