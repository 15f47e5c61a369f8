"""``mcp_approval_response`` input items, matched to the calls they answer.

An approval request shown to the client stands for a ``function_call`` item the model
made in an earlier turn, still unanswered in the history; its id is that item's id under
another prefix (``wire/mcp.py``). So the verified history alone says which call an
answer is for: no side table, nothing that could disagree with what the model saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.turns.data.prepared import PendingApproval
from agentic_api.wire.items import Item
from agentic_api.wire.mcp import call_item_id_for, parse_approval_response


def resolve_approvals(history: Sequence[Item], new_input: Sequence[Item]) -> list[PendingApproval]:
    """The input's approval answers with their calls; 400 for an answer to no call, to
    a call already answered, or twice to the same call."""
    if not any(item.type == "mcp_approval_response" for item in new_input):
        return []
    calls: dict[str, dict[str, Any]] = {}
    for item in history:
        if item.type == "function_call":
            calls[item.id] = item.as_dict()
    answered = {
        value.get("call_id")
        for value in (item.as_dict() for item in [*history, *new_input])
        if value.get("type") == "function_call_output"
    }
    pending: list[PendingApproval] = []
    seen: set[str] = set()
    for index, item in enumerate(new_input):
        if item.type != "mcp_approval_response":
            continue
        param = f"input[{index}]"
        answer = parse_approval_response(item.as_dict(), param)
        call_item = call_item_id_for(answer.approval_request_id)
        call = calls.get(call_item) if call_item else None
        if call is None or not isinstance(call.get("call_id"), str):
            raise InvalidRequest(
                f"No approval request '{answer.approval_request_id}' is waiting in this "
                "response's history.",
                param=f"{param}.approval_request_id",
                code="approval_request_not_found",
            )
        if call["call_id"] in answered or call["call_id"] in seen:
            raise InvalidRequest(
                f"Approval request '{answer.approval_request_id}' was already answered.",
                param=f"{param}.approval_request_id",
                code="approval_request_answered",
            )
        seen.add(call["call_id"])
        pending.append(PendingApproval(answer, call, param))
    return pending
