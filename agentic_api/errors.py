"""One error type for the whole server, rendered in OpenAI's error shape by the HTTP layer.

Every layer raises ``ApiError`` (or a subclass) with the HTTP status and the OpenAI error
``type``/``code``/``param`` it deserves, so a client sees the same shape whatever failed.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    status_code: int = 500
    error_type: str = "server_error"
    code: str | None = None
    # Raised after the model ran (a commit refused for a lost conversation race): an
    # Idempotency-Key records it as the outcome rather than letting a retry run again.
    after_model: bool = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status_code: int | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status_code is not None:
            self.status_code = status_code
        if error_type is not None:
            self.error_type = error_type

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class CallerError(ApiError):
    """A 4xx: the request is at fault, which OpenAI types ``invalid_request_error``."""

    status_code = 400
    error_type = "invalid_request_error"


class InvalidRequest(CallerError):
    """400: a field or parameter is malformed or asks for what cannot be."""


class Unauthorized(CallerError):
    status_code = 401
    code = "invalid_api_key"


class NotFound(CallerError):
    status_code = 404
    code = "not_found"


class Conflict(CallerError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(CallerError):
    status_code = 413
    code = "request_too_large"


class Unprocessable(CallerError):
    status_code = 422


class UpstreamError(ApiError):
    """The model server failed; ``status_code`` is 502 or 504 unless it answered 4xx itself."""

    status_code = 502
    error_type = "server_error"
    code = "upstream_error"


class CheckpointInvalid(ApiError):
    """Stored history failed verification; we refuse rather than send a different prefix."""

    status_code = 500
    error_type = "server_error"
    code = "checkpoint_invalid"
