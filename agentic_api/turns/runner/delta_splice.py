"""A text delta relayed as bytes: the upstream's JSON matched against the previous
delta's, and our JSON made by splicing its text and our next sequence number into what
the previous delta became, instead of parsed, checked, translated and serialized again.

Within one item of a round, a model server's deltas differ only in their text and their
sequence number (docs/benchmarks/streaming/design.md), and so do ours. A template is
learned from a delta the general path relayed (``DeltaTemplate.learn``): its upstream
bytes, and the bytes the relay made of it, each cut around those two members. A later
delta is spliced when its bytes are the template's, member for member, with any text
and number in those two places. Every other member the general path reads or rewrites
(type, item id, output index, logprobs, …) is then byte for byte the one it already
judged, and the relay's and the check's state for that item is already what another
such delta would leave, so only the sequence number moves on.

The text is copied only when orjson would write back exactly what came: valid UTF-8,
no escape (no backslash), no control character (which the parser would refuse raw);
orjson escapes nothing else. Anything else goes the general way, which holds every rule;
``tests/unit/test_delta_splice.py`` compares the two byte for byte.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from agentic_api.turns.runner.relay import TEXT_DELTA, StreamRelay, ours_for_delta

# Stand-ins for the two members that vary, found again in the probes' JSON. The text's
# is a control character: orjson writes it escaped, and no text the splice copies holds
# an escape.
_TEXT_MARK = "\x00"
_TEXT_MARK_JSON = orjson.dumps(_TEXT_MARK)[1:-1]
_NUMBER_MARK = 918273645546372819
_NUMBER_MARK_JSON = str(_NUMBER_MARK).encode()
# What a text must not hold to be copied: an escape (orjson may write the character
# otherwise) or a control character (the parser refuses it raw).
_NOT_COPIED = re.compile(rb"[\x00-\x1f\\]")


class DeltaTemplate:
    """One item's text deltas as the upstream writes them and as we relay them."""

    __slots__ = ("_after_number", "_after_text", "_before", "_number_first", "_ours")

    def __init__(
        self,
        before: bytes,
        after_text: bytes,
        after_number: bytes | None,
        number_first: bool,
        ours: tuple[bytes, bytes],
    ) -> None:
        # Upstream: ``before`` TEXT ``after_text`` [NUMBER ``after_number``], or with the
        # number first, ``before`` NUMBER ``after_number`` TEXT ``after_text``.
        self._before = before
        self._after_text = after_text
        self._after_number = after_number
        self._number_first = number_first
        # Ours: ``ours[0]`` TEXT ``ours[1]`` SEQUENCE ``}``.
        self._ours = ours

    @classmethod
    def learn(cls, data: bytes, event: dict[str, Any], relay: StreamRelay) -> DeltaTemplate | None:
        """The template of ``event`` (parsed from ``data``), a text delta the general path
        has just relayed as is; None when its deltas cannot be spliced (the upstream's
        JSON is not orjson's compact form, the event is not one ``_text_delta`` takes)."""
        index = event.get("output_index")
        if (
            event.get("type") != TEXT_DELTA
            or type(index) is not int
            or not isinstance(event.get("delta"), str)
            or "item" in event
            or "part" in event
            or "response_id" in event
            or not relay.opened
        ):
            return None
        our_id = relay.shown_item_id(index)
        if our_id is None or orjson.dumps(event) != data:
            return None
        probe = {**event, "delta": _TEXT_MARK}
        numbered = "sequence_number" in probe
        if numbered:
            probe["sequence_number"] = _NUMBER_MARK
        upstream = orjson.dumps(probe)
        ours = ours_for_delta(probe, our_id, index + relay.offset)
        ours["sequence_number"] = _NUMBER_MARK
        ours_json = orjson.dumps(ours)
        if (
            upstream.count(_TEXT_MARK_JSON) != 1
            or upstream.count(_NUMBER_MARK_JSON) != numbered
            or ours_json.count(_TEXT_MARK_JSON) != 1
            or ours_json.count(_NUMBER_MARK_JSON) != 1
            or not ours_json.endswith(_NUMBER_MARK_JSON + b"}")
        ):
            return None
        ours_before, ours_rest = ours_json.split(_TEXT_MARK_JSON)
        ours_after = ours_rest[: -len(_NUMBER_MARK_JSON) - 1]
        if not numbered:
            before, after = upstream.split(_TEXT_MARK_JSON)
            return cls(before, after, None, False, (ours_before, ours_after))
        if upstream.index(_TEXT_MARK_JSON) < upstream.index(_NUMBER_MARK_JSON):
            before, rest = upstream.split(_TEXT_MARK_JSON)
            after_text, after_number = rest.split(_NUMBER_MARK_JSON)
            return cls(before, after_text, after_number, False, (ours_before, ours_after))
        before, rest = upstream.split(_NUMBER_MARK_JSON)
        after_number, after_text = rest.split(_TEXT_MARK_JSON)
        return cls(before, after_text, after_number, True, (ours_before, ours_after))

    def splice(self, data: bytes, relay: StreamRelay) -> tuple[bytes, int] | None:
        """Our JSON for ``data`` when it is one of this template's deltas, stamped with the
        relay's next sequence number, and that number; else None (and nothing changed)."""
        before, after_text, after_number = self._before, self._after_text, self._after_number
        if not data.startswith(before):
            return None
        start = len(before)
        if after_number is not None and self._number_first:
            split = data.find(after_number, start)
            if split == -1 or not _is_number(data[start:split]):
                return None
            start = split + len(after_number)
            end = data.find(b'"', start)
            if end == -1 or len(data) - end != len(after_text) or not data.endswith(after_text):
                return None
        else:
            end = data.find(b'"', start)
            if end == -1 or not data.startswith(after_text, end):
                return None
            rest = end + len(after_text)
            if after_number is None:
                if rest != len(data):
                    return None
            elif not data.endswith(after_number) or not _is_number(
                data[rest : len(data) - len(after_number)]
            ):
                return None
        text = data[start:end]
        if _NOT_COPIED.search(text) is not None:
            return None
        if not text.isascii():
            try:
                text.decode()
            except UnicodeDecodeError:
                return None
        ours_before, ours_after = self._ours
        sequence = relay.next_sequence()
        return b"".join((ours_before, text, ours_after, str(sequence).encode(), b"}")), sequence


def _is_number(digits: bytes) -> bool:
    """Whether ``digits`` is a number as JSON (and orjson, within 64 bits) reads it."""
    return digits.isdigit() and len(digits) <= 18 and (digits[:1] != b"0" or digits == b"0")
