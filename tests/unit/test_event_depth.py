"""An upstream event nested deeper than an answer may be is refused, whether its depth is
walked or its text already shows it cannot be that deep (``surely_shallow``)."""

from __future__ import annotations

import orjson
import pytest

from agentic_api.wire.upstream_answer import MAX_ANSWER_DEPTH, EventCheck, surely_shallow

LIMIT = MAX_ANSWER_DEPTH + 1


def nested_event(depth: int) -> bytes:
    """A delta event whose text nests ``depth`` levels (the event object is one)."""
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return b'{"type":"response.output_text.delta","delta":"x","extra":' + inner + b"}"


def checked(text: bytes) -> str | None:
    check = EventCheck()
    return check.problem(orjson.loads(text), shallow=surely_shallow(text))


@pytest.mark.parametrize("depth", [LIMIT + 1, LIMIT + 40])
def test_a_too_deep_event_is_never_taken_for_shallow(depth: int) -> None:
    text = nested_event(depth)
    assert not surely_shallow(text)
    problem = checked(text)
    assert problem is not None and "nested deeper" in problem


def test_an_event_at_the_limit_passes_either_way() -> None:
    text = nested_event(LIMIT)
    assert EventCheck().problem(orjson.loads(text)) == checked(text)


def test_short_or_bracket_poor_texts_are_shallow() -> None:
    delta = b'{"type":"response.output_text.delta","delta":" word","logprobs":[]}'
    assert surely_shallow(delta)
    # Long, but with few brackets: a long delta of text.
    assert surely_shallow(b'{"type":"t","delta":"' + b"a" * 10_000 + b'"}')
    # Brackets inside strings count against it: not shallow by the text, walked instead.
    many = b'{"type":"response.output_text.delta","delta":"' + b"[" * (3 * LIMIT) + b'"}'
    assert not surely_shallow(many)
    assert checked(many) is None
