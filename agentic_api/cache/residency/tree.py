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
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_api.cache.residency.events import BlockHash, BlocksStored

# A block's place in the tree: its parent's hash, or the salt (None: no salt) for a
# chain's first block. Hashes are int or bytes, salts str: the two never meet.
ParentKey = BlockHash | str | None


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
    keys: list[int] = []
    chain = hash(("salt", salt))
    for content in content_keys(tokens, block_size):
        chain = hash((chain, content))
        keys.append(chain)
    return keys


class BlockTree:
    """Plain data, no locks (``tracker.py`` holds them)."""

    def __init__(self, max_blocks: int) -> None:
        self.max_blocks = max_blocks
        # hash -> (parent key, content key or None when unmatchable); oldest stored first.
        self._blocks: dict[BlockHash, tuple[ParentKey, int | None]] = {}
        self._children: dict[tuple[ParentKey, int], BlockHash] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    def store(self, event: BlocksStored) -> int:
        """Adds the event's blocks; returns how many old blocks were forgotten for room."""
        contents = event.contents
        parent: ParentKey = event.parent if event.parent is not None else event.salt
        blocks, children = self._blocks, self._children
        for index, block_hash in enumerate(event.hashes):
            content = contents[index] if contents is not None else None
            before = blocks.pop(block_hash, None)
            if before is not None and before != (parent, content):
                self._unindex(block_hash, before)
            blocks[block_hash] = (parent, content)
            if content is not None:
                children[(parent, content)] = block_hash
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
            if node is not None:
                self._unindex(block_hash, node)

    def clear(self) -> None:
        self._blocks.clear()
        self._children.clear()

    def leading_blocks(self, keys: Sequence[int], salt: str | None) -> int:
        """How many of the leading blocks with these content keys the replica holds."""
        children = self._children
        parent: ParentKey = salt
        held = 0
        for content in keys:
            found = children.get((parent, content))
            if found is None:
                break
            held += 1
            parent = found
        return held

    def _unindex(self, block_hash: BlockHash, node: tuple[ParentKey, int | None]) -> None:
        parent, content = node
        if content is not None and self._children.get((parent, content)) == block_hash:
            del self._children[(parent, content)]
