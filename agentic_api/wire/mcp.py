"""MCP items and stream events in OpenAI's shapes (``mcp_list_tools``, ``mcp_call``,
``mcp_approval_request``; ``response.mcp_*`` events), and the ``mcp_approval_response``
input item a client answers an approval request with.

These are the client-facing shapes only: what the model sees of a gateway-run tool is a
plain ``function_call`` / ``function_call_output`` pair (see ``turns/kinds/tool_loop.py``).
The item ids a gateway call shows the client are derived from the id of the model's
``function_call`` item (same random part, another prefix), so the stored model-visible
history is enough to find the call an approval answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentic_api.errors import InvalidRequest
from lineage import IdKind, id_kind

# Item types the client sees but the model never does: they are kept in history for the
# record and skipped when the upstream request is rendered.
CLIENT_ONLY_TYPES = frozenset({"mcp_list_tools", "mcp_approval_request", "mcp_approval_response"})


def derived_id(call_item_id: str, kind: IdKind) -> str | None:
    """The id of the client-facing item that stands for the model's ``function_call``
    item ``call_item_id`` (``fc_<hex>`` -> ``mcp_<hex>`` / ``mcpr_<hex>``)."""
    prefix, sep, tail = call_item_id.partition("_")
    if not sep or not tail or prefix != IdKind.FUNCTION_CALL.value:
        return None
    return f"{kind.value}_{tail}"


def call_item_id_for(approval_request_id: str) -> str | None:
    """The model's ``function_call`` item id behind an approval request id."""
    if id_kind(approval_request_id) is not IdKind.MCP_APPROVAL:
        return None
    return f"{IdKind.FUNCTION_CALL.value}_{approval_request_id.partition('_')[2]}"


# --- output items ----------------------------------------------------------------------


def list_tools_item(
    item_id: str, server_label: str, tools: list[dict[str, Any]], error: str | None = None
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": item_id,
        "type": "mcp_list_tools",
        "server_label": server_label,
        "tools": tools,
    }
    if error is not None:
        item["error"] = error
    return item


def listed_tool(
    name: str,
    input_schema: dict[str, Any],
    description: str | None,
    annotations: dict[str, Any] | None,
) -> dict[str, Any]:
    """One entry of ``mcp_list_tools.tools`` (OpenAI's ``McpListToolsTool``)."""
    return {
        "name": name,
        "input_schema": input_schema,
        "description": description,
        "annotations": annotations,
    }


def call_item(
    item_id: str,
    *,
    server_label: str,
    name: str,
    arguments: str,
    status: str,
    output: str | None = None,
    error: dict[str, Any] | None = None,
    approval_request_id: str | None = None,
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "mcp_call",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "output": output,
        "error": error,
        "status": status,
        "approval_request_id": approval_request_id,
    }


def approval_request_item(
    item_id: str, *, server_label: str, name: str, arguments: str
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "mcp_approval_request",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
    }


# --- the ``error`` of an mcp_call (OpenAI's McpToolCallError union) ----------------------


def protocol_error(code: int, message: str) -> dict[str, Any]:
    return {"type": "mcp_protocol_error", "code": code, "message": message}


def execution_error(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "mcp_tool_execution_error", "content": content}


def http_error(code: int, message: str) -> dict[str, Any]:
    return {"type": "http_error", "code": code, "message": message}


# --- stream events (without sequence numbers; the relay stamps them) ---------------------


def item_added(output_index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": output_index, "item": item}


def item_done(output_index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": output_index, "item": item}


def progress_event(kind: str, output_index: int, item_id: str) -> dict[str, Any]:
    """``response.mcp_list_tools.{in_progress,completed,failed}`` and
    ``response.mcp_call.{in_progress,completed,failed}``: ``kind`` is the part after
    ``response.``, e.g. ``mcp_call.completed``."""
    return {"type": f"response.{kind}", "output_index": output_index, "item_id": item_id}


def arguments_delta(output_index: int, item_id: str, delta: str) -> dict[str, Any]:
    return {
        "type": "response.mcp_call_arguments.delta",
        "output_index": output_index,
        "item_id": item_id,
        "delta": delta,
    }


def arguments_done(output_index: int, item_id: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "response.mcp_call_arguments.done",
        "output_index": output_index,
        "item_id": item_id,
        "arguments": arguments,
    }


def call_started_events(output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """An ``mcp_call`` item (``in_progress``) announced before the gateway runs it: added,
    ``mcp_call.in_progress``, its arguments whole."""
    return [
        item_added(output_index, item),
        progress_event("mcp_call.in_progress", output_index, item["id"]),
        arguments_done(output_index, item["id"], item["arguments"]),
    ]


def call_finished_events(output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """An announced ``mcp_call`` item settled: ``mcp_call.completed`` / ``.failed`` when it
    ran, then done (a call not run, ``incomplete``, is only done)."""
    status = item["status"]
    ran = [progress_event(f"mcp_call.{status}", output_index, item["id"])]
    return [*(ran if status in ("completed", "failed") else []), item_done(output_index, item)]


def list_tools_events(output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of one ``mcp_list_tools`` item, from added to done."""
    in_progress = {**item, "tools": []}
    in_progress.pop("error", None)
    outcome = "failed" if item.get("error") else "completed"
    return [
        item_added(output_index, in_progress),
        progress_event("mcp_list_tools.in_progress", output_index, item["id"]),
        progress_event(f"mcp_list_tools.{outcome}", output_index, item["id"]),
        item_done(output_index, item),
    ]


def approval_request_events(output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    return [item_added(output_index, item), item_done(output_index, item)]


# --- input: mcp_approval_response -------------------------------------------------------


@dataclass(frozen=True)
class ApprovalResponse:
    approval_request_id: str
    approve: bool
    reason: str | None


def parse_approval_response(value: dict[str, Any], param: str) -> ApprovalResponse:
    """An ``mcp_approval_response`` input item, checked; ``param`` locates it in errors."""
    request_id = value.get("approval_request_id")
    if not isinstance(request_id, str) or not request_id:
        raise InvalidRequest(
            f"'{param}.approval_request_id' is required for mcp_approval_response.",
            param=f"{param}.approval_request_id",
            code="missing_required_parameter",
        )
    approve = value.get("approve")
    if not isinstance(approve, bool):
        raise InvalidRequest(
            f"'{param}.approve' must be a boolean.", param=f"{param}.approve", code="invalid_type"
        )
    reason = value.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidRequest(
            f"'{param}.reason' must be a string.", param=f"{param}.reason", code="invalid_type"
        )
    return ApprovalResponse(request_id, approve, reason)
