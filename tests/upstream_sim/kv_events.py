"""vLLM's KV-event publisher, as the simulator's prefix cache would drive it.

Same wire format as vLLM 0.32 (tests/fixtures/kv_events/ holds a real capture): a ZMQ PUB
socket sending ``[topic, seq (8-byte big-endian, from 0), msgpack([ts, [events], dp_rank])]``
with events as maps tagged by ``type``: ``BlockStored`` (one per run of newly cached
blocks, the salt in the chain's first block's extra keys, the request's session),
``BlockRemoved`` (one per evicted block, hash only) and ``AllBlocksCleared``. Like vLLM
it binds ``ipc://`` endpoints and connects to ``tcp://host:port`` ones.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import msgpack
import zmq


def session_of(json_body: Any, headers: Any) -> str | None:
    """vLLM's order: the body's ``session_id``, else the header, else ``vllm_xargs``."""
    body = json_body if isinstance(json_body, dict) else {}
    if isinstance(body.get("session_id"), str):
        return str(body["session_id"])
    if "x-session-id" in headers:
        return str(headers["x-session-id"])
    xargs = body.get("vllm_xargs")
    if isinstance(xargs, dict) and isinstance(xargs.get("session_id"), str):
        return str(xargs["session_id"])
    return None


def reports_reuse(json_body: Any) -> bool:
    xargs = json_body.get("vllm_xargs") if isinstance(json_body, dict) else None
    return isinstance(xargs, dict) and xargs.get("kv_cache_report_mode") == "full"


def block_hash(digest: bytes) -> int:
    # vLLM's CPU build reports 64-bit integer hashes.
    return int.from_bytes(digest[:8], "big")


def stored(
    hashes: list[int],
    parent: int | None,
    token_ids: list[int],
    block_size: int,
    salt: str | None,
    session_id: str | None,
) -> dict[str, Any]:
    extra: list[Any] = [None] * len(hashes)
    if parent is None and salt is not None:
        extra[0] = [salt]
    event: dict[str, Any] = {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": token_ids,
        "block_size": block_size,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": extra,
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
    }
    if session_id is not None:
        event["session_id"] = session_id
    return event


def removed(hash_: int) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": [hash_], "medium": "GPU", "group_idx": 0}


CLEARED: dict[str, Any] = {"type": "AllBlocksCleared"}


class KvEventPublisher:
    def __init__(self, endpoint: str, topic: str = "") -> None:
        self._lock = threading.Lock()
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        if endpoint.startswith("ipc://") or "*" in endpoint:
            self._socket.bind(endpoint)
        else:
            self._socket.connect(endpoint)
        self._topic = topic.encode()
        self._seq = 0

    def publish(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        with self._lock:
            payload = msgpack.packb([time.time(), events, 0])
            self._socket.send_multipart([self._topic, self._seq.to_bytes(8, "big"), payload])
            self._seq += 1

    def send_raw(self, frames: list[bytes]) -> None:
        """Sends frames as given (tests of what a subscriber does with a broken message)."""
        with self._lock:
            self._socket.send_multipart(frames)

    def close(self) -> None:
        with self._lock:
            self._socket.close(linger=0)
            self._context.term()
