"""How stored items are shown in listings (input items, conversation items): the stored
bytes themselves never change (they are what the model is shown again), only their
presentation, which is the shape OpenAI's item types require."""

from __future__ import annotations

from typing import Any

from agentic_api.wire.events import ITEM_STATUSES
from agentic_api.wire.response_object import output_part, reasoning_shape

# Items a list shows with a ``status`` (OpenAI's item types require one): a stored item
# is a finished one.
_WITH_STATUS = frozenset({"message", "function_call", "function_call_output"})


def present_item(item: dict[str, Any]) -> dict[str, Any]:
    """Messages with content parts (even when given as a plain string) and a status."""
    kind = item.get("type")
    shown = item
    if kind == "message":
        content = item.get("content")
        if isinstance(content, str):
            part_type = "output_text" if item.get("role") == "assistant" else "input_text"
            content = [{"type": part_type, "text": content}]
        if isinstance(content, list):
            content = [output_part(part) for part in content]
        shown = {**item, "content": content}
    if kind == "reasoning":
        # A client's reasoning item may come without a summary (it is replayed as sent).
        shown = reasoning_shape(shown)
    if kind in _WITH_STATUS and shown.get("status") not in ITEM_STATUSES:
        shown = {**shown, "status": "completed"}
    return shown
