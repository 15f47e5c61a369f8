"""Stream events and WebSocket frames in OpenAI's shapes: the few constructors every
path (SSE, stored-event replay, background follow, WebSocket) builds its events with.

Events are built without ``sequence_number``; whoever orders the stream stamps it
(``turns/runner/relay.py`` for a live turn, the rebuilder and the background writers for
theirs).
"""

from __future__ import annotations

from typing import Any

from agentic_api.errors import ApiError
from agentic_api.wire import status as vocabulary


def snapshot_event(kind: str, response: dict[str, Any]) -> dict[str, Any]:
    """``response.created`` / ``.in_progress`` / ``.queued`` with the object as it is."""
    if kind not in vocabulary.SNAPSHOT_EVENTS:
        raise ValueError(f"{kind!r} is not a snapshot event")
    return {"type": kind, "response": response}


def terminal_event(response: dict[str, Any]) -> dict[str, Any]:
    """The event that ends a response's stream, named after its (terminal) status."""
    return {"type": vocabulary.terminal_event_type(response["status"]), "response": response}


def error_event(error: ApiError) -> dict[str, Any]:
    """``{"type": "error", "code", "message", "param"}``: an error within a stream."""
    return {
        "type": vocabulary.ERROR,
        "code": error.code,
        "message": error.message,
        "param": error.param,
    }


def is_error_event(event: dict[str, Any]) -> bool:
    return event.get("type") == vocabulary.ERROR


def stamped(event: dict[str, Any], sequence: int) -> dict[str, Any]:
    return {**event, "sequence_number": sequence}


def socket_error_frame(error: ApiError, stream_id: str | None) -> dict[str, Any]:
    """A WebSocket request that failed outside any response's stream (bad frame, refused
    request): the HTTP status it would have had, and the error nested as OpenAI's."""
    frame: dict[str, Any] = {
        "type": vocabulary.ERROR,
        "status": error.status_code,
        "error": _nested(error.error_type, error.code, error.message, error.param),
    }
    if stream_id is not None:
        frame["stream_id"] = stream_id
    return frame


def socket_event(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    """A stream event as a WebSocket frame: errors carry their details nested (as
    OpenAI's do over the socket), and the lane's ``stream_id`` is echoed."""
    if is_error_event(event) and "error" not in event:
        event = {
            "type": vocabulary.ERROR,
            "sequence_number": event.get("sequence_number"),
            "error": _nested(
                vocabulary.SERVER_ERROR, event.get("code"), event.get("message"), event.get("param")
            ),
        }
    return {**event, "stream_id": stream_id} if stream_id is not None else event


def _nested(error_type: str, code: Any, message: Any, param: Any) -> dict[str, Any]:
    return {"type": error_type, "code": code, "message": message, "param": param}
