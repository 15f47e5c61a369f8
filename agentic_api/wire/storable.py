"""What both databases can hold, checked before anything runs.

JSON documents and items keep exactly what the client sent and what the model said: they
are stored as JSON text, where a NUL character (U+0000) is the escape ``\\u0000``, so
their canonical bytes round-trip on SQLite and PostgreSQL alike. A plain string column
(ids, model names, item types, names, metadata that is queried) cannot hold NUL on
PostgreSQL, so those values are refused with a 400 here, before the model is called.
JSON nesting is bounded at parse time: encoders, validators and the stored documents
(which nest the client's values a few levels deeper) all recurse per level.
"""

from __future__ import annotations

from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.wire.limits import MAX_JSON_DEPTH

NUL = "\x00"


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``{}`` and ``[]`` are 1),
    computed without recursion, so no input can exhaust the stack."""
    if isinstance(value, dict):
        top: Any = value.values()
    elif isinstance(value, list):
        top = value
    else:
        return 0
    # Most values (every streamed delta) hold scalars and empty lists only: answered
    # without the general walk, which costs several times more per event.
    nested = False
    for member in top:
        if isinstance(member, dict | list):
            if member:
                return _walked_depth(value)
            nested = True
    return 2 if nested else 1


def _walked_depth(value: Any) -> int:
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict):
            members: Any = current.values()
        elif isinstance(current, list):
            members = current
        else:
            continue
        deepest = max(deepest, depth)
        pending.extend((member, depth + 1) for member in members if isinstance(member, dict | list))
    return deepest


def check_depth(value: Any) -> None:
    if json_depth(value) > MAX_JSON_DEPTH:
        raise too_deep()


def too_deep() -> InvalidRequest:
    return InvalidRequest(
        f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted.",
        code="json_too_deep",
    )


def check_no_nul(value: str, param: str) -> None:
    """``value`` goes into a plain string column: NUL cannot be stored there."""
    if NUL in value:
        raise InvalidRequest(
            f"'{param}' must not contain the NUL character (U+0000).",
            param=param,
            code="invalid_value",
        )
