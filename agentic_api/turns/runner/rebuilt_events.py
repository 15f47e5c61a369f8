"""An event stream rebuilt from a stored Response object, for responses that were not
streamed when created (streamed ones replay their stored events verbatim). Built with
the same constructors as a live stream, so a field cannot be present in one and absent
in the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentic_api.wire.events import (
    CREATED,
    IN_PROGRESS,
    TERMINAL_STATUSES,
    snapshot_event,
    terminal_event,
)
from agentic_api.wire.response_object import output_part, streamed_item


def rebuild_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def add(event: dict[str, Any]) -> None:
        event["sequence_number"] = len(events)
        events.append(event)

    snapshot = {
        **response,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
    }
    add(snapshot_event(CREATED, snapshot))
    add(snapshot_event(IN_PROGRESS, snapshot))
    for index, item in enumerate(response.get("output") or []):
        _item_events(index, item, add)
    if response.get("status") in TERMINAL_STATUSES:
        add(terminal_event(response))
    return events


def _item_events(index: int, item: dict[str, Any], add: Callable[[dict[str, Any]], None]) -> None:
    item_id = item.get("id")
    kind = item.get("type")
    opening = {**item, "status": "in_progress"}
    if kind == "message":
        opening["content"] = []
    elif kind == "function_call":
        opening["arguments"] = ""
    add(
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": streamed_item(opening),
        }
    )
    if kind == "message":
        for part_index, part in enumerate(item.get("content") or []):
            where = {"item_id": item_id, "output_index": index, "content_index": part_index}
            text = part.get("text", "") if isinstance(part, dict) else ""
            empty = output_part({**part, "text": ""}) if isinstance(part, dict) else part
            add({"type": "response.content_part.added", **where, "part": empty})
            if isinstance(part, dict) and part.get("type") == "output_text":
                add({"type": "response.output_text.delta", **where, "delta": text, "logprobs": []})
                add({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
            add({"type": "response.content_part.done", **where, "part": output_part(part)})
    elif kind == "function_call":
        arguments = item.get("arguments", "")
        where = {"item_id": item_id, "output_index": index}
        add({"type": "response.function_call_arguments.delta", **where, "delta": arguments})
        add({"type": "response.function_call_arguments.done", **where, "arguments": arguments})
    add({"type": "response.output_item.done", "output_index": index, "item": item})
