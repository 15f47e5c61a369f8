"""The one vocabulary of response statuses, snapshot and terminal events, and the error
codes a Response object may carry. Every other module names these through here."""

from __future__ import annotations

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
