"""One replica's KV blocks as a tree, so that a token sequence's *leading* resident blocks
can be read off it: how much of a response's own prompt + output the replica still holds.

Built from what ``BlockStored`` says, without mirroring vLLM's hashing: each stored block
hangs under its ``parent_block_hash`` (the previous block of its run under the first's
parent; a chain's first block under its ``cache_salt``), keyed by its token ids. A walk
from the salt's root down the sequence's full blocks, child by child, stops at the first
block the replica did not report, or reported removed — exactly where vLLM's prefix
lookup stops. The tree is keyed by content, not by who stored a block, so a branch of a
session (a fork, a sibling) and a session that starts on another's cached prefix (a shared
system prompt) find the blocks they would reuse whoever stored them, in vLLM's default
report mode.

Errs toward showing less: a block whose extra keys we cannot reproduce from token ids
alone (multimodal inputs, a LoRA adapter) is held but never matched; a block whose parent
was never reported is unreachable; past ``max_blocks`` the oldest stored are forgotten.
A removed block's descendants stay: vLLM keeps them too, and they are reachable again once
the block is stored again (recomputed by a later request).

**Blocks stored before this process listened** (it restarted, or joined after the replica
had cached): their reports never came, so a walk over a prefix they hold stops at once.
Two things keep that from reading as "nothing held":

- *Grafts.* A turn served ``n`` blocks from the cache and storing blocks of its own proves
  that its first ``n`` blocks were held then: its first stored block hangs under the hash
  of block ``n - 1`` (``parent_block_hash``), a hash this tree has never seen (an
  *orphan* parent). ``graft`` puts the turn's first ``n`` blocks in (by their content,
  from the turn's token ids), the last under that real hash, the others as ``Inferred``
  nodes. They stay while the real one does: vLLM evicts a chain tail first (a block is
  used whenever a block after it is, and a finished request frees its blocks tail first),
  so while block ``n - 1`` is held the blocks before it are; when it is reported removed
  the inferred ones go with it (their own removals name hashes we cannot map).
- *Known stops.* ``leading_blocks`` says whether the walk's stop is known: it ran to the
  end, or stopped at a block reported removed (a tombstone, kept for a while). Any other
  stop is at a block this process never heard of, which the replica's owner
  (``replica.py``) reads as unknown unless the replica's cache was empty when its reports
  began.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from agentic_api.cache.residency.events import BlockHash, BlocksStored

_K = TypeVar("_K")
_V = TypeVar("_V")

# Tombstones, orphan parents and unknown removals remembered (each, oldest forgotten first).
MEMORY_KEPT = 65_536


@dataclass(frozen=True, slots=True)
class Inferred:
    """A block held before this process listened, put in by a graft: its place in the
    chain (``chain_keys``), as its real hash is not known."""

    chain: int


# A node of the tree: a block the replica reported (its hash), or an inferred one.
NodeKey = BlockHash | Inferred
# A block's place in the tree: its parent's node, or the salt (None: no salt) for a
# chain's first block. Hashes are int or bytes, salts str: the two never meet.
ParentKey = NodeKey | str | None


def content_keys(tokens: Sequence[int], block_size: int) -> list[int]:
    """The key of each full block of ``tokens`` (as the tree keys a stored block)."""
    return [
        hash(tuple(tokens[start : start + block_size]))
        for start in range(0, len(tokens) - block_size + 1, block_size)
    ]


def chain_keys(tokens: Sequence[int], block_size: int, salt: str | None) -> list[int]:
    """An identity for each full block of ``tokens`` *in its place*: the block's content
    and every block before it, under ``salt`` — equal for two sequences exactly where vLLM
    would share the block (a common prefix), so a set of them counts shared blocks once."""
    return chain_keys_of(content_keys(tokens, block_size), salt)


class BlockTree:
    """Plain data, no locks (``tracker.py`` holds them)."""

    def __init__(self, max_blocks: int) -> None:
        self.max_blocks = max_blocks
        # node -> (parent key, content key or None when unmatchable); oldest stored first.
        self._blocks: dict[NodeKey, tuple[ParentKey, int | None]] = {}
        self._children: dict[tuple[ParentKey, int], NodeKey] = {}
        # Blocks reported removed, by place: a walk that stops at one knows why.
        self._gone: OrderedDict[tuple[ParentKey, int], None] = OrderedDict()
        # (session, first block's content) of a run stored under a parent never reported
        # here -> that parent's hash: what a graft needs.
        self._orphans: OrderedDict[tuple[str | None, int], BlockHash] = OrderedDict()
        # Removed hashes that were never reported stored (no graft may use one).
        self._unknown_removed: OrderedDict[BlockHash, None] = OrderedDict()
        # A grafted real block -> the inferred ones it vouches for; each inferred node's
        # number of vouchers.
        self._grafts: dict[BlockHash, tuple[Inferred, ...]] = {}
        self._vouchers: dict[Inferred, int] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    def store(self, event: BlocksStored) -> int:
        """Adds the event's blocks; returns how many old blocks were forgotten for room."""
        contents = event.contents
        parent: ParentKey = event.parent if event.parent is not None else event.salt
        blocks, children = self._blocks, self._children
        if event.parent is not None and event.parent not in blocks and contents:
            first = contents[0]
            if first is not None:
                _remember(self._orphans, (event.session_id, first), event.parent)
        for index, block_hash in enumerate(event.hashes):
            content = contents[index] if contents is not None else None
            before = blocks.pop(block_hash, None)
            if before is not None and before != (parent, content):
                self._unindex(block_hash, before)
            blocks[block_hash] = (parent, content)
            if content is not None:
                children[(parent, content)] = block_hash
                self._gone.pop((parent, content), None)
            parent = block_hash
        forgotten = 0
        while len(blocks) > self.max_blocks:
            oldest = next(iter(blocks))
            self._unindex(oldest, blocks.pop(oldest))
            forgotten += 1
        return forgotten

    def remove(self, hashes: Sequence[BlockHash]) -> None:
        for block_hash in hashes:
            node = self._blocks.pop(block_hash, None)
            if node is None:
                _remember(self._unknown_removed, block_hash, None)
                continue
            self._unindex(block_hash, node)
            parent, content = node
            if content is not None:
                _remember(self._gone, (parent, content), None)
            for inferred in self._grafts.pop(block_hash, ()):
                # Nothing vouches for it any more: it is not known to be held.
                left = self._vouchers.pop(inferred, 1) - 1
                if left > 0:
                    self._vouchers[inferred] = left
                    continue
                dropped = self._blocks.pop(inferred, None)
                if dropped is not None:
                    self._unindex(inferred, dropped)

    def clear(self) -> None:
        for memory in (
            self._blocks,
            self._children,
            self._gone,
            self._orphans,
            self._unknown_removed,
            self._grafts,
            self._vouchers,
        ):
            memory.clear()

    def leading_blocks(self, keys: Sequence[int], salt: str | None) -> tuple[int, bool]:
        """How many of the leading blocks with these content keys the replica holds, and
        whether that is known to be where they end: the walk ran through all of them, or
        stopped at a block reported removed. False: it stopped at a block never reported
        here (held or not, this tree cannot tell)."""
        children = self._children
        parent: ParentKey = salt
        held = 0
        for content in keys:
            found = children.get((parent, content))
            if found is None:
                return held, (parent, content) in self._gone
            held += 1
            parent = found
        return held, True

    def graft(
        self, keys: Sequence[int], salt: str | None, session_id: str | None, stored: int
    ) -> int:
        """A turn of ``session_id`` was served the blocks with content ``keys`` from the
        cache and then stored a run whose first block has content ``stored``: if that run
        hangs under a parent never reported here, puts the served blocks in (the last
        under that parent's hash). Returns how many blocks the walk gained."""
        if not keys:
            return 0
        parent_hash = self._orphans.get((session_id, stored))
        if (
            parent_hash is None
            or parent_hash in self._blocks
            or parent_hash in self._unknown_removed
            or (parent_hash, stored) not in self._children
        ):
            return 0
        before, _known = self.leading_blocks(keys, salt)
        parent: ParentKey = salt
        made: list[Inferred] = []
        for index, chain in enumerate(chain_keys_of(keys, salt)):
            content = keys[index]
            found = self._children.get((parent, content))
            last = index == len(keys) - 1
            if found is not None and not last:
                parent = found
                continue
            if found is not None:
                return 0  # the served prefix is known already, under another hash
            node: NodeKey = parent_hash if last else Inferred(chain)
            self._blocks[node] = (parent, content)
            self._children[(parent, content)] = node
            self._gone.pop((parent, content), None)
            if isinstance(node, Inferred):
                made.append(node)
                self._vouchers[node] = self._vouchers.get(node, 0) + 1
            parent = node
        self._grafts[parent_hash] = tuple(made)
        del self._orphans[(session_id, stored)]
        after, _known = self.leading_blocks(keys, salt)
        return after - before

    def _unindex(self, node: NodeKey, place: tuple[ParentKey, int | None]) -> None:
        parent, content = place
        if content is not None and self._children.get((parent, content)) == node:
            del self._children[(parent, content)]


def chain_keys_of(contents: Sequence[int], salt: str | None) -> list[int]:
    """``chain_keys`` from the blocks' content keys."""
    keys: list[int] = []
    chain = hash(("salt", salt))
    for content in contents:
        chain = hash((chain, content))
        keys.append(chain)
    return keys


def _remember(memory: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > MEMORY_KEPT:
        memory.popitem(last=False)
