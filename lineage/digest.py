"""The prefix digest: a hash chain over the model-visible items of a request.

Entry ``i`` of the chain commits to the model, the cache salt and items
``0..i``. Two requests therefore share entry ``i`` exactly when they agree
on all of those, which is the same condition under which vLLM can reuse the
KV cache for that prefix; a fork shares the chain up to where it diverges.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence

from lineage._framing import LENGTH_BYTES, frame, tagged_sha256

__all__ = [
    "DIGEST_HEX_LENGTH",
    "common_prefix_length",
    "digest_chain",
    "digest_extend",
    "digest_root",
    "extend_digest",
    "is_valid_digest",
    "prefix_digest",
]

DIGEST_HEX_LENGTH = 64

# Separate tags for the root and for each link, so a root can never equal a
# link and no item list can be mistaken for another of a different length.
_ROOT_TAG = b"agentic-api/prefix-digest/v1/root"
_ITEM_TAG = b"agentic-api/prefix-digest/v1/item"
_HEX_DIGITS = frozenset("0123456789abcdef")
# Every link hashes frame(_ITEM_TAG, previous, item); the first two fields' framing never
# changes (a digest is always 32 bytes), so it is computed once. Same bytes, less work:
# rehydration runs this over the whole history on every turn.
_LINK_HEAD = frame(_ITEM_TAG) + (32).to_bytes(LENGTH_BYTES, "big")


def digest_root(model: str, cache_salt: str) -> str:
    """The digest of an empty prefix under ``model`` and ``cache_salt``."""
    return tagged_sha256(_ROOT_TAG, model.encode("utf-8"), cache_salt.encode("utf-8")).hex()


def digest_extend(digest: str, item: bytes) -> str:
    """The digest of the prefix ``digest`` stands for, followed by ``item``."""
    if not is_valid_digest(digest):
        raise ValueError(f"not a prefix digest: {digest!r}")
    return tagged_sha256(_ITEM_TAG, bytes.fromhex(digest), item).hex()


def _links(start: bytes, items: Iterable[bytes]) -> Iterator[bytes]:
    previous = start
    for item in items:
        link = hashlib.sha256(_LINK_HEAD)
        link.update(previous)
        link.update(len(item).to_bytes(LENGTH_BYTES, "big"))
        link.update(item)
        previous = link.digest()
        yield previous


def prefix_digest(model: str, cache_salt: str, items: Iterable[bytes]) -> str:
    return extend_digest(digest_root(model, cache_salt), items)


def extend_digest(digest: str, items: Iterable[bytes]) -> str:
    """The digest of the prefix ``digest`` stands for, followed by all of ``items``."""
    if not is_valid_digest(digest):
        raise ValueError(f"not a prefix digest: {digest!r}")
    last = bytes.fromhex(digest)
    for link in _links(last, items):
        last = link
    return last.hex()


def digest_chain(model: str, cache_salt: str, items: Iterable[bytes]) -> list[str]:
    """The digest after each item; empty for an empty item list."""
    root = bytes.fromhex(digest_root(model, cache_salt))
    return [link.hex() for link in _links(root, items)]


def common_prefix_length(chain_a: Sequence[str], chain_b: Sequence[str]) -> int:
    """How many leading items two chains share."""
    shared = 0
    for digest_a, digest_b in zip(chain_a, chain_b, strict=False):
        if digest_a != digest_b:
            break
        shared += 1
    return shared


def is_valid_digest(value: str) -> bool:
    return len(value) == DIGEST_HEX_LENGTH and _HEX_DIGITS.issuperset(value)
