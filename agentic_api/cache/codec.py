"""Token ids on disk: unsigned 32-bit little-endian, zstd-compressed.

A 2,000-token prompt is 8 KB packed and typically 3-4 KB compressed. Decoding checks the
length it was stored with, so a truncated or corrupted blob is an error, never a shorter
list of ids.
"""

from __future__ import annotations

import sys
import threading
from array import array

import zstandard

ENCODING = "u32le+zstd"
_LEVEL = 3


# A compressor per thread, made once: making one costs about as much as compressing a
# short prompt, and one object must not be used by two threads at once.
_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    compressor: zstandard.ZstdCompressor | None = getattr(_local, "compressor", None)
    if compressor is None:
        compressor = _local.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return compressor


class ArtifactCorrupt(ValueError):
    """A stored blob does not decode to the number of ids it was stored with."""


def pack_ids(ids: array[int]) -> bytes:
    if ids.typecode != "I" or ids.itemsize != 4:
        raise ValueError("token ids must be an array('I') of 32-bit items")
    raw = ids
    if sys.byteorder == "big":
        raw = array("I", ids)
        raw.byteswap()
    return _compressor().compress(raw.tobytes())


def unpack_ids(blob: bytes, count: int, encoding: str = ENCODING) -> array[int]:
    if encoding != ENCODING:
        raise ArtifactCorrupt(f"unknown token encoding {encoding!r}")
    try:
        raw = zstandard.ZstdDecompressor().decompress(blob, max_output_size=max(count * 4, 1))
    except zstandard.ZstdError as exc:
        raise ArtifactCorrupt(f"token ids do not decompress: {exc}") from exc
    if len(raw) != count * 4:
        raise ArtifactCorrupt(f"{len(raw) // 4} token ids stored where {count} were recorded")
    ids = array("I")
    ids.frombytes(raw)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids
