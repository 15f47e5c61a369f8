"""The one byte form of JSON values that we hash, store and replay.

A prefix cache only hits when the replayed request is byte-identical to the
one the model saw, so every place that serialises an item must agree on
exactly one encoding. Values outside plain JSON are refused instead of being
coerced, because a silent coercion (``{1: x}`` becoming ``{"1": x}``) would
make two different values share bytes or make a value change on replay.
"""

from __future__ import annotations

import hashlib
import json
import math

__all__ = ["canonical_json", "sha256_hex"]

_ENCODER = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=True,
    separators=(",", ":"),
    # The walk below has already refused cycles with a clearer message.
    check_circular=False,
)


def canonical_json(value: object) -> bytes:
    """Encode ``value`` as sorted, compact UTF-8 JSON.

    Raises ``TypeError`` for values that are not plain JSON types and
    ``ValueError`` for non-string keys, non-finite floats, cycles and strings
    that UTF-8 cannot carry (lone surrogates).
    """
    _check(value, set())
    text = _ENCODER.encode(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"string is not valid Unicode (lone surrogate): {exc.reason}") from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check(value: object, open_containers: set[int]) -> None:
    # bool is an int, so it is covered here.
    if value is None or isinstance(value, str | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not valid JSON")
        return
    if not isinstance(value, dict | list | tuple):
        raise TypeError(f"{type(value).__name__} is not a JSON value")
    marker = id(value)
    if marker in open_containers:
        raise ValueError("circular reference in JSON value")
    open_containers.add(marker)
    if isinstance(value, dict):
        for key, member in value.items():
            if not isinstance(key, str):
                raise ValueError(f"JSON object keys must be strings, not {type(key).__name__}")
            _check(member, open_containers)
    else:
        for member in value:
            _check(member, open_containers)
    open_containers.discard(marker)
