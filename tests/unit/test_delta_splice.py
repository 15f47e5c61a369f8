"""The text delta splice (``turns/runner/delta_splice.py``) writes exactly the bytes the
general path writes (parse, check, translate, serialize) and leaves exactly its state,
for every delta it takes; it takes the deltas model servers send (the key orders seen:
vLLM's and the simulator's, and the sequence number anywhere or absent); and it leaves
everything else, unchanged, to the general path.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import orjson
import pytest

from agentic_api.turns.runner.delta_splice import DeltaTemplate
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.wire.upstream_answer import EventCheck, surely_shallow

UPSTREAM_ID = "msg_8cae027dc1fdb64f"


def shown(offset: int) -> tuple[StreamRelay, EventCheck]:
    """A relay and its round's check after the round announced and showed item 0."""
    relay = StreamRelay({"id": "resp_ours", "object": "response", "output": []})
    relay.opening_events()
    relay.start_round(offset)
    check = EventCheck()
    added = {
        "type": "response.output_item.added",
        "sequence_number": 1,
        "output_index": 0,
        "item": {"id": UPSTREAM_ID, "type": "message", "content": []},
    }
    assert check.problem(added) is None
    assert relay.translate(added) is not None
    return relay, check


def state(relay: StreamRelay, check: EventCheck) -> tuple[Any, ...]:
    return (
        relay._next_sequence,
        dict(relay._ids_by_index),
        dict(relay._index_by_upstream_id),
        relay.first_token_seen,
        set(check._indices),
        set(check._item_ids),
    )


def general(data: bytes, relay: StreamRelay, check: EventCheck) -> bytes | str:
    """What ``round.py:pump`` and the plain turn make of ``data``: our JSON, or the
    problem that fails the turn."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "not JSON"
    problem = check.problem(parsed, shallow=surely_shallow(data))
    if problem is not None:
        return problem
    ours = relay.translate(parsed)
    assert ours is not None
    return orjson.dumps(ours)


def learned(first: dict[str, Any], offset: int) -> tuple[StreamRelay, EventCheck, DeltaTemplate]:
    """As ``round.py:pump`` leaves them once the general path relayed the delta ``first``."""
    relay, check = shown(offset)
    data = orjson.dumps(first)
    assert isinstance(general(data, relay, check), bytes)
    template = DeltaTemplate.learn(data, orjson.loads(data), relay)
    assert template is not None
    return relay, check, template


def compare(data: bytes, first: dict[str, Any] | None = None, offset: int = 0) -> bytes | None:
    """Runs the splice (learned from ``first``, by default the next delta's members) and
    the general path on twins; asserts they agree whenever the splice takes ``data`` (and
    that it changed nothing when it did not). Returns the splice's bytes."""
    if first is None:
        first = {**orjson.loads(data), "delta": "first", "sequence_number": 3}
    relay, check, template = learned(first, offset)
    twin_relay, twin_check = copy.deepcopy(relay), copy.deepcopy(check)
    before = state(relay, check)
    spliced = template.splice(data, relay)
    theirs = general(data, twin_relay, twin_check)
    if spliced is None:
        assert state(relay, check) == before
        return None
    ours, sequence = spliced
    assert ours == theirs
    assert sequence == orjson.loads(ours)["sequence_number"]
    assert state(relay, check) == state(twin_relay, twin_check)
    return ours


VLLM = {
    "content_index": 0,
    "delta": " word",
    "item_id": UPSTREAM_ID,
    "logprobs": [],
    "output_index": 0,
    "sequence_number": 4,
    "type": "response.output_text.delta",
}
SIMULATOR = {
    "type": "response.output_text.delta",
    "item_id": UPSTREAM_ID,
    "output_index": 0,
    "content_index": 0,
    "delta": " word",
    "logprobs": [],
    "sequence_number": 4,
}


@pytest.mark.parametrize("offset", [0, 2])
@pytest.mark.parametrize(
    "event",
    [
        VLLM,
        SIMULATOR,
        {**VLLM, "logprobs": None},
        {key: value for key, value in VLLM.items() if key != "logprobs"},
        {key: value for key, value in VLLM.items() if key != "sequence_number"},
        {key: value for key, value in VLLM.items() if key != "item_id"},
        {**VLLM, "item_id": None},
        {**VLLM, "item_id": "msg_other_alias"},
        {**VLLM, "obfuscation": "x1Yz"},
        {**VLLM, "logprobs": "none"},
        {**VLLM, "delta": ""},
        {**VLLM, "delta": "héllo 😀 \u2028 \x7f / <b>"},
    ],
    ids=[
        "vllm",
        "simulator",
        "null-logprobs",
        "no-logprobs",
        "no-seq",
        "no-item-id",
        "null-item-id",
        "alias",
        "extra",
        "string-logprobs",
        "empty",
        "unicode",
    ],
)
def test_the_deltas_model_servers_send_are_spliced_as_the_general_path_writes_them(
    event: dict[str, Any], offset: int
) -> None:
    first = {**event, "delta": "first"}
    if "sequence_number" in event:
        first["sequence_number"] = 3
    assert compare(orjson.dumps(event), first, offset) is not None


def test_the_sequence_number_may_come_anywhere() -> None:
    number_first = {"type": "response.output_text.delta", "sequence_number": 12, **VLLM}
    for number in (0, 9, 10, 123456):
        assert compare(orjson.dumps({**number_first, "sequence_number": number})) is not None


@pytest.mark.parametrize(
    "data",
    [
        # Escapes and control characters: the general path's serializer may write them
        # otherwise than they came.
        json.dumps({**VLLM, "delta": "héllo"}, separators=(",", ":")).encode(),
        orjson.dumps({**VLLM, "delta": 'say "hi"'}),
        orjson.dumps({**VLLM, "delta": "a\\b"}),
        orjson.dumps({**VLLM, "delta": "line\nbreak"}),
        orjson.dumps({**VLLM, "delta": "tab\there"}),
        json.dumps(VLLM).encode(),  # spaces between members
        orjson.dumps({**VLLM, "logprobs": [{"token": " word", "logprob": -0.1}]}),
        orjson.dumps({**VLLM, "output_index": 1}),  # an item never announced
        orjson.dumps({**VLLM, "output_index": -1}),
        orjson.dumps({**VLLM, "output_index": 1.0}),
        orjson.dumps({**VLLM, "output_index": "0"}),
        orjson.dumps({**VLLM, "output_index": None}),
        orjson.dumps({key: value for key, value in VLLM.items() if key != "output_index"}),
        orjson.dumps({key: value for key, value in VLLM.items() if key != "delta"}),
        orjson.dumps({**VLLM, "delta": 7}),
        orjson.dumps({**VLLM, "delta": None}),
        orjson.dumps({**VLLM, "part": None}),
        orjson.dumps({**VLLM, "item": None}),
        orjson.dumps({**VLLM, "response_id": "resp_up"}),
        orjson.dumps({**VLLM, "content_index": 0.5}),
        orjson.dumps({**VLLM, "type": "response.output_text.done"}),
        orjson.dumps({**VLLM, "Type": "x"}),
        orjson.dumps(VLLM)[:-1] + b',"delta":"twice"}',
        orjson.dumps(VLLM).replace(b'"content_index":0', b'"content_index":-0'),
        orjson.dumps(VLLM).replace(b'"content_index":0', b'"content_index":007'),
        orjson.dumps(VLLM).replace(b'"content_index":0', b'"content_index":' + b"9" * 25),
        orjson.dumps(VLLM).replace(b" word", b" \xff\xfe"),  # not UTF-8: fails the turn
        orjson.dumps(VLLM).replace(b" word", b"\xed\xa0\x80"),  # a surrogate: not UTF-8
        orjson.dumps(VLLM)[:-1],  # cut short
    ],
)
def test_anything_else_goes_the_general_way_untouched(data: bytes) -> None:
    assert compare(data, VLLM) is None


@pytest.mark.parametrize(
    "number",
    [b"-1", b"007", b"1.5", b"1e3", b"9" * 25, b"", b'"4"', b"null"],
)
def test_a_sequence_number_the_parser_would_read_otherwise_goes_the_general_way(
    number: bytes,
) -> None:
    data = orjson.dumps(VLLM).replace(b'"sequence_number":4', b'"sequence_number":' + number)
    assert compare(data, VLLM) is None
    number_first = {"type": "response.output_text.delta", "sequence_number": 4, **VLLM}
    data = orjson.dumps(number_first).replace(
        b'"sequence_number":4', b'"sequence_number":' + number
    )
    assert compare(data, number_first) is None


def test_no_template_from_what_the_splice_cannot_copy() -> None:
    relay, check = shown(0)
    spaced = json.dumps(VLLM).encode()
    assert isinstance(general(spaced, relay, check), bytes)
    assert DeltaTemplate.learn(spaced, orjson.loads(spaced), relay) is None
    relay.opened = False
    data = orjson.dumps(VLLM)
    assert DeltaTemplate.learn(data, orjson.loads(data), relay) is None


ALPHABET = (
    "abc XYZ 019 .,;:!?-_/<>{}[]()'*&^%$#@~`|+= é ß 中文 😀 \u2028 \u2029 \x7f \ufeff "
    '"\\\n\t\r\x00\x1f\b\f'
)


def test_many_random_deltas_are_byte_identical_to_the_general_path() -> None:
    # Every delta either spliced to the general path's bytes and state, or left to it;
    # and the plain ones (no character the splice cannot copy) all spliced.
    chooser = random.Random(41)
    spliced = 0
    for number in range(3000):
        text = "".join(chooser.choice(ALPHABET) for _ in range(chooser.randint(0, 12)))
        event = dict(VLLM if number % 2 else SIMULATOR)
        event["delta"] = text
        event["sequence_number"] = number
        event["content_index"] = chooser.choice([0, 1, 17])
        if chooser.random() < 0.2:
            del event["logprobs"]
        data = orjson.dumps(event)
        ours = compare(data, offset=chooser.choice([0, 3]))
        # A template for one item never takes the deltas of another.
        assert compare(data, {**event, "item_id": "msg_another"}) is None
        plain = not any(ch in text for ch in '"\\') and all(ord(ch) >= 0x20 for ch in text)
        assert (ours is not None) == plain, text
        spliced += ours is not None
    assert spliced > 500
