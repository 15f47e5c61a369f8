"""Unambiguous byte framing shared by every hash in this package.

Each field is preceded by its length, so no two different field lists can
frame to the same bytes (``"ab" + "c"`` never equals ``"a" + "bc"``). Every
hash starts with its own tag, so a value hashed for one purpose can never
stand in for a value hashed for another.
"""

from __future__ import annotations

import hashlib

LENGTH_BYTES = 8


def frame(*fields: bytes) -> bytes:
    return b"".join(len(field).to_bytes(LENGTH_BYTES, "big") + field for field in fields)


def tagged_sha256(tag: bytes, *fields: bytes) -> bytes:
    return hashlib.sha256(frame(tag, *fields)).digest()
