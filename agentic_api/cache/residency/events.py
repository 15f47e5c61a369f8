"""vLLM's KV-event wire format, decoded into the few facts residency needs.

A ZMQ message is three frames: the publisher's topic, an 8-byte big-endian sequence
number (one per batch, restarting at 0 with the process) and a msgpack payload
``[ts, [events...], dp_rank]`` (``dp_rank`` is left out when unset). Each event is a map
with a ``type`` key; fields that are None are left out. Only the three kinds below matter
here; anything else (a newer vLLM's new kinds) is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

# vLLM's block hashes are 64-bit ints on this build and bytes on others; both are hashable.
BlockHash = int | bytes
# Events about blocks held on the engine's own device; offloading tiers report other media.
DEVICE_MEDIA = frozenset({None, "GPU"})


class MalformedBatch(ValueError):
    """A frame that does not decode as a KV-event batch: whatever it said is lost."""


@dataclass(frozen=True, slots=True)
class BlocksStored:
    hashes: tuple[BlockHash, ...]
    block_size: int
    session_id: str | None
    # The cache_salt, when the first of these blocks starts the prompt (vLLM puts the salt
    # in that block's extra keys only).
    salt: str | None
    # The block the first of these continues (None: they start the prompt).
    parent: BlockHash | None = None
    # Per block, the key of its token ids (``tree.content_keys``), None for a block whose
    # hash also covers keys token ids cannot give (multimodal inputs, a LoRA adapter);
    # None for all when the token ids did not come in whole blocks.
    contents: tuple[int | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    hashes: tuple[BlockHash, ...]


@dataclass(frozen=True, slots=True)
class AllCleared:
    pass


Event = BlocksStored | BlocksRemoved | AllCleared


@dataclass(frozen=True, slots=True)
class Batch:
    seq: int
    ts: float
    events: tuple[Event, ...]


def decode_frames(frames: list[bytes]) -> Batch:
    """One ZMQ message -> its batch. Raises ``MalformedBatch`` on anything else."""
    if len(frames) != 3 or len(frames[1]) != 8:
        raise MalformedBatch(f"expected [topic, 8-byte seq, payload], got {len(frames)} frames")
    seq = int.from_bytes(frames[1], "big", signed=True)
    try:
        payload = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MalformedBatch(f"payload is not msgpack: {exc}") from exc
    if not isinstance(payload, list) or len(payload) < 2 or not isinstance(payload[1], list):
        raise MalformedBatch("payload is not [ts, [events...], dp_rank]")
    ts = payload[0]
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise MalformedBatch("batch timestamp is not a number")
    events = tuple(
        event for event in (decode_event(raw) for raw in payload[1]) if event is not None
    )
    return Batch(seq=seq, ts=float(ts), events=events)


def decode_event(raw: Any) -> Event | None:
    """One event, or None for kinds, media and cache groups residency does not track.

    A removal we cannot read raises: it may have removed blocks we hold, so the caller
    must drop what it knows. A store we cannot read is merely skipped (coverage shrinks,
    nothing is invented)."""
    if not isinstance(raw, dict):
        raise MalformedBatch("event is not a map")
    kind = raw.get("type")
    if kind == "AllBlocksCleared":
        return AllCleared()
    if kind not in ("BlockStored", "BlockRemoved"):
        return None
    if raw.get("medium") not in DEVICE_MEDIA or raw.get("group_idx") not in (None, 0):
        return None
    hashes = _hashes(raw.get("block_hashes"))
    if kind == "BlockRemoved":
        if hashes is None:
            raise MalformedBatch("BlockRemoved without readable block_hashes")
        return BlocksRemoved(hashes)
    block_size = raw.get("block_size")
    if hashes is None or not isinstance(block_size, int) or block_size <= 0:
        return None
    session = raw.get("session_id")
    parent = raw.get("parent_block_hash")
    extra_keys = raw.get("extra_keys")
    salt = _salt(extra_keys, parent, raw.get("lora_name"))
    return BlocksStored(
        hashes=hashes,
        block_size=block_size,
        session_id=session if isinstance(session, str) and session else None,
        salt=salt,
        parent=parent if isinstance(parent, int | bytes) and not isinstance(parent, bool) else None,
        contents=_contents(raw.get("token_ids"), len(hashes), block_size, extra_keys, salt),
    )


def _contents(
    token_ids: Any, blocks: int, block_size: int, extra_keys: Any, salt: str | None
) -> tuple[int | None, ...] | None:
    if not isinstance(token_ids, list) or len(token_ids) != blocks * block_size:
        return None
    if extra_keys is not None and not (isinstance(extra_keys, list) and len(extra_keys) == blocks):
        return None
    extras: list[Any] | None = extra_keys
    contents: list[int | None] = []
    for index in range(blocks):
        extra = extras[index] if extras is not None else None
        # Only the salt (first block) is ours to give; any other key we cannot match.
        if extra is not None and not (index == 0 and salt is not None and extra == [salt]):
            contents.append(None)
            continue
        start = index * block_size
        try:
            contents.append(hash(tuple(token_ids[start : start + block_size])))
        except TypeError:  # an unhashable id: not a token sequence we could ever match
            contents.append(None)
    return tuple(contents)


def _hashes(value: Any) -> tuple[BlockHash, ...] | None:
    if not isinstance(value, list):
        return None
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | bytes):
            return None
    return tuple(value)


def _salt(extra_keys: Any, parent: Any, lora_name: Any) -> str | None:
    # Only a chain's first block (no parent) can carry the salt. vLLM lists that block's
    # keys as: the LoRA name (when set), multimodal (id, offset) pairs, the salt, then
    # prompt-embedding digests: the salt is the first string after the LoRA name.
    if parent is not None or not isinstance(extra_keys, list) or not extra_keys:
        return None
    first = extra_keys[0]
    if not isinstance(first, list):
        return None
    strings = [key for key in first if isinstance(key, str)]
    if lora_name is not None and strings[:1] == [lora_name]:
        strings = strings[1:]
    return strings[0] if strings else None
