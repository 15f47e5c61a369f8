"""Response statuses and stream events in OpenAI's shapes: the one vocabulary of
statuses, snapshot and terminal events and the error codes a Response object may carry
(every other module names these through here), and the few constructors every path (SSE,
stored-event replay, background follow, WebSocket) builds its events and frames with.

Events are built without ``sequence_number``; whoever orders the stream stamps it
(``turns/runner/relay.py`` for a live turn, the rebuilder and the background writers for
theirs).
"""

from __future__ import annotations

from typing import Any

from agentic_api.errors import ApiError

RESPONSE_STATUSES = frozenset(
    {"queued", "in_progress", "completed", "incomplete", "failed", "cancelled"}
)
TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
# A stored response of one of these may be continued (its output is a checkpoint).
CONTINUABLE_STATUSES = frozenset({"completed", "incomplete"})
# Statuses of an output item (messages, function calls, their outputs).
ITEM_STATUSES = frozenset({"in_progress", "completed", "incomplete"})

CREATED = "response.created"
IN_PROGRESS = "response.in_progress"
QUEUED = "response.queued"
ERROR = "error"
# Events that carry the whole Response object before it has finished.
SNAPSHOT_EVENTS = frozenset({CREATED, IN_PROGRESS, QUEUED})
TERMINAL_EVENTS = frozenset(f"response.{status}" for status in TERMINAL_STATUSES)
# The terminal events a model server ends its stream with (it never cancels).
UPSTREAM_TERMINAL_EVENTS = frozenset(
    {"response.completed", "response.incomplete", "response.failed"}
)

# ``Response.error.code`` takes only the values of OpenAI's schema. Our own reasons
# (worker_lost, upstream_stream_interrupted, …) travel in the ``error`` event's free
# ``code`` and in the message.
SERVER_ERROR = "server_error"
RATE_LIMITED = "rate_limit_exceeded"


def terminal_event_type(status: str) -> str:
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"{status!r} is not a terminal status")
    return f"response.{status}"


def snapshot_event(kind: str, response: dict[str, Any]) -> dict[str, Any]:
    """``response.created`` / ``.in_progress`` / ``.queued`` with the object as it is."""
    if kind not in SNAPSHOT_EVENTS:
        raise ValueError(f"{kind!r} is not a snapshot event")
    return {"type": kind, "response": response}


def terminal_event(response: dict[str, Any]) -> dict[str, Any]:
    """The event that ends a response's stream, named after its (terminal) status."""
    return {"type": terminal_event_type(response["status"]), "response": response}


def error_event(error: ApiError) -> dict[str, Any]:
    """``{"type": "error", "code", "message", "param"}``: an error within a stream."""
    return {
        "type": ERROR,
        "code": error.code,
        "message": error.message,
        "param": error.param,
    }


def is_error_event(event: dict[str, Any]) -> bool:
    return event.get("type") == ERROR


def stamped(event: dict[str, Any], sequence: int) -> dict[str, Any]:
    return {**event, "sequence_number": sequence}


def socket_error_frame(error: ApiError, stream_id: str | None) -> dict[str, Any]:
    """A WebSocket request that failed outside any response's stream (bad frame, refused
    request): the HTTP status it would have had, and the error nested as OpenAI's."""
    frame: dict[str, Any] = {
        "type": ERROR,
        "status": error.status_code,
        "error": _nested(error.error_type, error.code, error.message, error.param),
    }
    if stream_id is not None:
        frame["stream_id"] = stream_id
    return frame


def socket_event(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    """A stream event as a WebSocket frame: errors carry their details nested (as
    OpenAI's do over the socket) and at the top (the SDK's stream error event, which
    the socket's event union also holds), and the lane's ``stream_id`` is echoed."""
    if is_error_event(event) and "error" not in event:
        event = {
            **event,
            "error": _nested(
                SERVER_ERROR, event.get("code"), event.get("message"), event.get("param")
            ),
        }
    return {**event, "stream_id": stream_id} if stream_id is not None else event


def _nested(error_type: str, code: Any, message: Any, param: Any) -> dict[str, Any]:
    return {"type": error_type, "code": code, "message": message, "param": param}
