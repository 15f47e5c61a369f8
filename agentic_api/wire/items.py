"""Input items as we store and replay them: validated, given ids, canonically encoded.

An item's canonical JSON bytes are fixed the first time we see it; every later turn
replays exactly those bytes, which is what keeps the upstream prompt prefix identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from agentic_api.errors import InvalidRequest
from agentic_api.wire.limits import MAX_ID_LENGTH, MAX_ITEM_TYPE_LENGTH
from agentic_api.wire.storable import check_no_nul
from lineage import IdKind, canonical_json, mint_id

_KIND_BY_TYPE = {
    "message": IdKind.MESSAGE,
    "function_call": IdKind.FUNCTION_CALL,
    "function_call_output": IdKind.FUNCTION_CALL_OUTPUT,
    "reasoning": IdKind.REASONING,
    "mcp_call": IdKind.MCP_CALL,
    "mcp_list_tools": IdKind.MCP_LIST_TOOLS,
    "mcp_approval_request": IdKind.MCP_APPROVAL,
    "compaction": IdKind.COMPACTION,
}
_ROLES = frozenset({"user", "assistant", "system", "developer"})


@dataclass(frozen=True)
class Item:
    """One model-visible item: its id, type and the exact bytes we send upstream."""

    id: str
    type: str
    data: bytes

    def as_dict(self) -> dict[str, Any]:
        value = orjson.loads(self.data)
        assert isinstance(value, dict)
        return value


def id_kind_for(item_type: str) -> IdKind:
    return _KIND_BY_TYPE.get(item_type, IdKind.ITEM)


def normalize_input(
    value: str | list[Any], *, assign_ids: bool, param: str = "input"
) -> list[dict[str, Any]]:
    """The request's ``input`` as a list of item objects.

    A string is one user message. Items without ``type`` but with ``role`` and ``content``
    are messages (OpenAI's "easy" input form). With ``assign_ids`` every item lacking an
    ``id`` gets one, so stored history can be addressed item by item. ``param`` names the
    field the items came in (``items`` for the Conversations API) in error messages.
    """
    if isinstance(value, str):
        items: list[dict[str, Any]] = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}
        ]
    else:
        items = [_check_item(raw, f"{param}[{index}]") for index, raw in enumerate(value)]
    if assign_ids:
        items = [
            item
            if isinstance(item.get("id"), str) and item["id"]
            else {**item, "id": mint_id(id_kind_for(item["type"]))}
            for item in items
        ]
    return items


def _check_item(raw: Any, param: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidRequest(f"'{param}' must be an object.", param=param, code="invalid_type")
    item_type = raw.get("type")
    if item_type is None:
        if "role" in raw and "content" in raw:
            item_type = "message"
            raw = {"type": "message", **raw}
        else:
            raise InvalidRequest(
                f"'{param}' has no 'type' (and is not a role/content message).",
                param=f"{param}.type",
                code="missing_required_parameter",
            )
    if not isinstance(item_type, str) or not item_type or len(item_type) > MAX_ITEM_TYPE_LENGTH:
        raise InvalidRequest(
            f"'{param}.type' must be a non-empty string.",
            param=f"{param}.type",
            code="invalid_type",
        )
    check_no_nul(item_type, f"{param}.type")
    if "id" in raw and raw["id"] is not None:
        _check_item_id(raw["id"], f"{param}.id")
    if item_type == "message":
        _check_message(raw, param)
    elif item_type in ("function_call_output", "function_call") and (
        not isinstance(raw.get("call_id"), str) or not raw["call_id"]
    ):
        raise InvalidRequest(
            f"'{param}.call_id' is required for {item_type}.",
            param=f"{param}.call_id",
            code="missing_required_parameter",
        )
    elif item_type == "compaction" and not isinstance(raw.get("encrypted_content"), str):
        raise InvalidRequest(
            f"'{param}.encrypted_content' is required for a compaction item.",
            param=f"{param}.encrypted_content",
            code="missing_required_parameter",
        )
    if raw.get("id") is None and "id" in raw:
        raw = {k: v for k, v in raw.items() if k != "id"}
    checked: dict[str, Any] = raw
    return checked


def _check_item_id(value: Any, param: str) -> None:
    # An item id is a column of its own (response_items, conversation_items).
    if not isinstance(value, str):
        raise InvalidRequest(f"'{param}' must be a string.", param=param, code="invalid_type")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidRequest(
            f"'{param}' may be at most {MAX_ID_LENGTH} characters, got {len(value)}.",
            param=param,
            code="invalid_value",
        )
    check_no_nul(value, param)


def _check_message(raw: dict[str, Any], param: str) -> None:
    role = raw.get("role")
    if role not in _ROLES:
        raise InvalidRequest(
            f"'{param}.role' must be one of {sorted(_ROLES)}.",
            param=f"{param}.role",
            code="invalid_value",
        )
    content = raw.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(
            f"'{param}.content' must be a string or a list of parts.",
            param=f"{param}.content",
            code="invalid_type",
        )
    for part_index, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(
                f"'{param}.content[{part_index}]' must be an object with a 'type'.",
                param=f"{param}.content[{part_index}]",
                code="invalid_type",
            )


def to_item(value: dict[str, Any], *, param: str = "input") -> Item:
    try:
        data = canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"An input item cannot be encoded: {exc}", param=param) from exc
    return Item(id=str(value.get("id") or ""), type=str(value["type"]), data=data)
