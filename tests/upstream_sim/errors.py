"""vLLM's error bodies.

vLLM (0.32) answers every API error as ``{"error": {"message", "type", "param",
"code"}}`` where ``code`` is the HTTP status as an *integer* and ``type`` is an
exception-like name ("BadRequestError", "NotFoundError", "InternalServerError"), or,
for request-schema errors caught by FastAPI (bad JSON, wrong content type, missing
fields), the status phrase "Bad Request". Our server must map these, not pass them on.
"""

from __future__ import annotations

from typing import Any

import orjson


class SimHTTPError(Exception):
    """Raised while validating a request; rendered as a vLLM error response."""

    def __init__(
        self,
        status: int,
        message: str,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.err_type, self.status, self.param)


def error_body(
    message: str, err_type: str = "BadRequestError", status: int = 400, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def error_bytes(
    message: str, err_type: str = "BadRequestError", status: int = 400, param: str | None = None
) -> bytes:
    return orjson.dumps(error_body(message, err_type, status, param))


def schema_error(message: str) -> SimHTTPError:
    """What vLLM's RequestValidationError handler returns."""
    return SimHTTPError(400, message, "Bad Request")


def internal_error_type(status: int) -> str:
    if status == 404:
        return "NotFoundError"
    if 400 <= status < 500:
        return "BadRequestError"
    return "InternalServerError"
