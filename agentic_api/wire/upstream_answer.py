"""Is what the model server answered a well-formed response? Checked before we relay,
store or continue from it.

A turn whose upstream answer is not a response (a ``response.completed`` whose
``response`` is ``"oops"``, an ``output`` that is not a list, a status that is a number,
deltas for an item that was never announced, token counts no column can hold) must end
as a stored failure, never as a checkpoint later turns would replay. The checks cover
what the Responses schema requires of the parts we read and store; fields we do not act
on pass as they are.
"""

from __future__ import annotations

from typing import Any

from agentic_api.wire.events import TERMINAL_EVENTS
from agentic_api.wire.limits import MAX_INTEGER, MAX_ITEM_TYPE_LENGTH, MAX_JSON_DEPTH
from agentic_api.wire.storable import NUL, json_depth

# A final object the model server may send: cancelled is ours to decide, not its.
FINAL_STATUSES = frozenset({"completed", "incomplete", "failed"})
_SNAPSHOT_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})
_TEXT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
    }
)
# Stored events wrap the answer a few levels deeper; orjson refuses past 255 levels.
MAX_ANSWER_DEPTH = 2 * MAX_JSON_DEPTH
_USAGE_COUNTERS = ("input_tokens", "output_tokens", "total_tokens")
_USAGE_DETAILS = (
    ("input_tokens_details", "cached_tokens"),
    ("output_tokens_details", "reasoning_tokens"),
)


def surely_shallow(text: bytes) -> bool:
    """Whether JSON ``text`` (UTF-8 bytes) cannot nest deeper than an event may (``EventCheck``),
    told from the text alone: each level opens a bracket and closes it, so a text with
    few brackets, or too short to hold that many pairs, is within the limit whatever it
    says (brackets inside strings only count against it). Every delta is answered by its
    length; the walk over the parsed event it spares was most of the check's cost."""
    limit = MAX_ANSWER_DEPTH + 1
    return len(text) <= 2 * limit + 1 or text.count(b"{") + text.count(b"[") <= limit


def final_problem(final: Any) -> str | None:
    """Why ``final`` (the upstream's final Response object) is not well-formed, or None."""
    if not isinstance(final, dict):
        return "the response is not an object"
    status = final.get("status")
    if status not in FINAL_STATUSES:
        return f"the response's status {status!r} is not one of {sorted(FINAL_STATUSES)}"
    output = final.get("output")
    if not isinstance(output, list):
        return "the response's 'output' is not a list"
    for index, item in enumerate(output):
        problem = item_problem(item)
        if problem is not None:
            return f"output[{index}] {problem}"
    for key in ("error", "incomplete_details"):
        if final.get(key) is not None and not isinstance(final[key], dict):
            return f"the response's '{key}' is not an object"
    usage = final.get("usage")
    if usage is not None:
        problem = _usage_problem(usage)
        if problem is not None:
            return problem
    if json_depth(final) > MAX_ANSWER_DEPTH:
        return f"the response is nested deeper than {MAX_ANSWER_DEPTH} levels"
    return None


def item_problem(item: Any, *, partial: bool = False) -> str | None:
    """Why an output item is not well-formed. ``partial``: an item as announced by
    ``response.output_item.added``, whose content is still to come."""
    if not isinstance(item, dict):
        return "is not an object"
    kind = item.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > MAX_ITEM_TYPE_LENGTH or NUL in kind:
        return "has no valid 'type'"
    if "id" in item and item["id"] is not None and not isinstance(item["id"], str):
        return "has an 'id' that is not a string"
    if partial:
        return None
    if kind == "message":
        if not isinstance(item.get("role"), str):
            return "is a message without a 'role'"
        content = item.get("content")
        if not isinstance(content, list) or not all(
            isinstance(part, dict) and isinstance(part.get("type"), str) for part in content
        ):
            return "is a message whose 'content' is not a list of typed parts"
    elif kind == "function_call":
        for key in ("name", "arguments", "call_id"):
            if not isinstance(item.get(key), str):
                return f"is a function call without a string '{key}'"
    return None


def _usage_problem(usage: Any) -> str | None:
    if not isinstance(usage, dict):
        return "the response's 'usage' is not an object"
    counters = [(key, usage.get(key)) for key in _USAGE_COUNTERS]
    for outer, inner in _USAGE_DETAILS:
        details = usage.get(outer)
        if details is None:
            continue
        if not isinstance(details, dict):
            return f"'usage.{outer}' is not an object"
        counters.append((f"{outer}.{inner}", details.get(inner)))
    for key, value in counters:
        if value is not None and not _is_count(value):
            return f"'usage.{key}' is not a token count"
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INTEGER


class EventCheck:
    """Checks one upstream round's stream event by event: each well-formed, and every
    event about an output item naming one that ``response.output_item.added`` announced."""

    def __init__(self) -> None:
        self._indices: set[int] = set()
        self._item_ids: set[str] = set()

    def problem(self, event: Any, *, shallow: bool = False) -> str | None:
        """``shallow``: its text was found ``surely_shallow``, so its depth is not walked."""
        if not isinstance(event, dict):
            return "an event is not an object"
        kind = event.get("type")
        if not isinstance(kind, str) or not kind:
            return "an event has no 'type'"
        if not shallow and json_depth(event) > MAX_ANSWER_DEPTH + 1:
            return f"a {kind} event is nested deeper than {MAX_ANSWER_DEPTH} levels"
        if kind == "response.output_text.delta":
            # Most of every stream: straight to what the order below checks for it.
            return self._delta_problem(kind, event)
        if kind in TERMINAL_EVENTS:
            problem = final_problem(event.get("response"))
            return None if problem is None else f"{kind}: {problem}"
        if kind in _SNAPSHOT_EVENTS:
            if "response" in event and not isinstance(event["response"], dict):
                return f"{kind}: the response is not an object"
            return None
        if kind == "error":
            return None
        if kind == "response.output_item.added":
            return self._added(event)
        if kind == "response.output_item.done":
            problem = self._refers_to_known_item(kind, event)
            if problem is not None:
                return problem
            problem = item_problem(event.get("item"))
            return None if problem is None else f"{kind}: the item {problem}"
        return self._delta_problem(kind, event)

    def _delta_problem(self, kind: str, event: dict[str, Any]) -> str | None:
        """Any other event about an item: the item announced; a text delta's a string."""
        problem = self._refers_to_known_item(kind, event)
        if problem is not None:
            return problem
        if kind in _TEXT_DELTAS and not isinstance(event.get("delta"), str):
            return f"{kind}: 'delta' is not a string"
        return None

    def _added(self, event: dict[str, Any]) -> str | None:
        index = event.get("output_index")
        if not isinstance(index, int) or not _is_count(index):
            return "response.output_item.added: 'output_index' is not a valid index"
        item = event.get("item")
        problem = item_problem(item, partial=True)
        if problem is not None or not isinstance(item, dict):
            return f"response.output_item.added: the item {problem}"
        self._indices.add(index)
        if isinstance(item.get("id"), str):
            self._item_ids.add(item["id"])
        return None

    def _refers_to_known_item(self, kind: str, event: dict[str, Any]) -> str | None:
        if "output_index" in event:
            index = event["output_index"]
            if not _is_count(index) or index not in self._indices:
                return f"{kind}: output_index {index!r} names no announced output item"
            if isinstance(event.get("item_id"), str):
                self._item_ids.add(event["item_id"])
        elif "item_id" in event and event["item_id"] not in self._item_ids:
            return f"{kind}: item_id {event['item_id']!r} names no announced output item"
        return None
