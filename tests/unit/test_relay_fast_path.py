"""The relay's shortcut for text deltas (``StreamRelay._text_delta``) makes exactly the
event, and leaves exactly the state, that its general translation does: same keys in the
same order, same ids, same sequence numbers; and it leaves to the general path every
delta it was not written for."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentic_api.turns.runner import relay as relay_module
from agentic_api.turns.runner.relay import StreamRelay


def relay_with_a_shown_item(offset: int) -> StreamRelay:
    relay = StreamRelay({"id": "resp_ours", "object": "response", "output": []})
    relay.opening_events()
    relay.start_round(offset)
    relay.translate(
        {
            "type": "response.output_item.added",
            "sequence_number": 1,
            "output_index": 0,
            "item": {"id": "msg_up", "type": "message", "content": []},
        }
    )
    return relay


def general_path(relay: StreamRelay) -> StreamRelay:
    """A copy of ``relay`` that translates every event the general way."""
    twin = copy.deepcopy(relay)
    twin._text_delta = lambda event: None  # type: ignore[method-assign]
    return twin


def state(relay: StreamRelay) -> tuple[Any, ...]:
    return (
        relay._next_sequence,
        dict(relay._ids_by_index),
        dict(relay._index_by_upstream_id),
        relay.first_token_seen,
    )


DELTA = {
    "type": "response.output_text.delta",
    "sequence_number": 7,
    "item_id": "msg_up",
    "output_index": 0,
    "content_index": 0,
    "delta": " word",
    "logprobs": [],
}


@pytest.mark.parametrize("offset", [0, 3])
@pytest.mark.parametrize(
    "event",
    [
        DELTA,
        {**DELTA, "logprobs": None},
        {key: value for key, value in DELTA.items() if key != "logprobs"},
        {key: value for key, value in DELTA.items() if key != "sequence_number"},
        {key: value for key, value in DELTA.items() if key != "item_id"},
        {**DELTA, "item_id": "msg_other_alias"},
        {**DELTA, "obfuscation": "x1"},
        {**DELTA, "logprobs": [{"token": " word", "logprob": -0.1}]},
    ],
    ids=["plain", "null-logprobs", "no-logprobs", "no-seq", "no-item-id", "alias", "extra", "lp"],
)
def test_a_delta_of_a_shown_item_is_translated_as_the_general_path_does(
    event: dict[str, Any], offset: int
) -> None:
    fast = relay_with_a_shown_item(offset)
    general = general_path(fast)
    ours, theirs = fast.translate(dict(event)), general.translate(dict(event))
    assert ours is not None and theirs is not None
    assert list(ours.items()) == list(theirs.items())
    assert state(fast) == state(general)
    # The shortcut was taken (the general twin is what it is compared with).
    assert fast._text_delta(dict(event)) is not None


@pytest.mark.parametrize(
    "event",
    [
        {**DELTA, "output_index": 5},  # an item not shown yet: the general path mints it
        {**DELTA, "output_index": True},  # not an int
        {**DELTA, "output_index": "0"},
        {**DELTA, "part": {"type": "output_text", "text": ""}},
        {**DELTA, "item": {"type": "message"}},
        {**DELTA, "response_id": "resp_up"},
    ],
    ids=["unshown", "bool-index", "str-index", "part", "item", "response-id"],
)
def test_a_delta_the_shortcut_was_not_written_for_takes_the_general_path(
    event: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = relay_with_a_shown_item(0)
    # An item id the general path mints is the same on both sides.
    monkeypatch.setattr(relay_module, "mint_id", lambda kind: "msg_minted")
    assert fast._text_delta(dict(event)) is None
    general = general_path(fast)
    ours, theirs = fast.translate(dict(event)), general.translate(dict(event))
    assert ours == theirs
    assert state(fast) == state(general)
