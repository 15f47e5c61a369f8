"""Typed errors of the turn pipeline."""

from __future__ import annotations

from agentic_api.errors import ApiError, Conflict, InvalidRequest, NotFound


def previous_response_not_found(response_id: str) -> ApiError:
    return NotFound(
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def previous_response_not_continuable(response_id: str, status: str) -> ApiError:
    if status in ("queued", "in_progress"):
        return Conflict(
            f"Previous response '{response_id}' is still {status}; wait for it to finish.",
            param="previous_response_id",
            code="previous_response_in_progress",
        )
    return InvalidRequest(
        f"Previous response '{response_id}' is {status} and cannot be continued.",
        param="previous_response_id",
        code="previous_response_not_continuable",
    )


def conversation_not_found(conversation_id: str, *, param: str | None = None) -> ApiError:
    """Unknown, deleted, or another tenant's (which is indistinguishable on purpose)."""
    return NotFound(
        f"Conversation with id '{conversation_id}' not found.",
        param=param,
        code="conversation_not_found" if param else "not_found",
    )


def conversation_conflict(conversation_id: str) -> ApiError:
    return Conflict(
        f"Conversation '{conversation_id}' changed while this response was being generated "
        "(another response or an item change committed first); this response was not "
        "stored. Retry the request to continue from the conversation's current state.",
        param="conversation",
        code="conversation_conflict",
    )


def conversation_history_changed(response_id: str, reason: str) -> ApiError:
    return Conflict(
        f"Response '{response_id}' continues a conversation whose history has changed since "
        f"({reason}); it cannot be continued with previous_response_id. Continue the "
        "conversation with 'conversation' instead.",
        param="previous_response_id",
        code="conversation_history_changed",
    )
