"""Input item types vLLM 0.32 parses but cannot render into a prompt.

Its Responses front end accepts every item type of the ``openai`` package it ships, then
builds chat messages from them; for an item it has no message for it answers 400
``Unsupported input item type: <type>`` (param ``input``). The ones a Responses server
in front of it must never forward are OpenAI's compaction items: the ``compaction``
item a summary travels in and the ``compaction_trigger`` that asks for one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import SimHTTPError

UNSUPPORTED_ITEM_TYPES = frozenset({"compaction", "compaction_trigger"})


def check_renderable(request_input: Any) -> None:
    if not isinstance(request_input, list):
        return
    for item in request_input:
        item_type = item.get("type") if isinstance(item, Mapping) else None
        if item_type in UNSUPPORTED_ITEM_TYPES:
            raise SimHTTPError(400, f"Unsupported input item type: {item_type}", param="input")
