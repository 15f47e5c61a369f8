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
