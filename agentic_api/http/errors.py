"""Renders every failure in OpenAI's error shape (Anthropic's on the Messages API's routes);
no framework HTML or ``{"detail": …}``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response

from agentic_api.errors import ApiError
from agentic_api.http.json_response import JsonResponse
from agentic_api.log import get_logger
from agentic_api.wire import anthropic

log = get_logger("agentic_api.errors")

_STATUS_CODES = {
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
}


def error_body(error: ApiError, path: str = "") -> dict[str, Any]:
    """The error in the shape the route's clients expect: Anthropic's SDKs and Claude Code
    read ``{"type": "error", "error": {"type", "message"}}`` on the Messages API's paths."""
    return anthropic.error_body(error) if anthropic.is_anthropic_path(path) else error.body()


# A 503 is a state that passes (the database busy, restarting or unreachable): the
# client is told when to try again; the SDKs' retries honour it.
RETRY_AFTER_SECONDS = "1"


def error_response(
    error: ApiError, headers: dict[str, str] | None = None, *, path: str = ""
) -> JsonResponse:
    if error.status_code == 503:
        headers = {"Retry-After": RETRY_AFTER_SECONDS, **(headers or {})}
    return JsonResponse(error_body(error, path), status_code=error.status_code, headers=headers)


def _param_from_location(location: Sequence[Any]) -> str | None:
    parts = [str(p) for p in location if p not in ("body", "query", "path", "header")]
    if not parts:
        return None
    text = parts[0]
    for part in parts[1:]:
        text += f"[{part}]" if part.isdigit() else f".{part}"
    return text


def validation_error(exc: RequestValidationError) -> ApiError:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param = _param_from_location(first.get("loc", ()))
    message = str(first.get("msg", "invalid request"))
    if param:
        message = f"Invalid value for '{param}': {message}"
    return ApiError(
        message,
        param=param,
        code="invalid_value" if param else "invalid_request",
        status_code=400,
        error_type="invalid_request_error",
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc, path=request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        return error_response(validation_error(exc), path=request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        status = exc.status_code
        message = str(exc.detail) if exc.detail else "request failed"
        if status == 404:
            message = f"Unknown route: {request.method} {request.url.path}"
        headers = dict(exc.headers or {})
        if status == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}"
            # The router names only the first route whose path matched; a path served by
            # several routes (GET, POST and DELETE of one conversation) allows them all.
            headers["Allow"] = ", ".join(allowed_methods(request))
        error = ApiError(
            message,
            code=_STATUS_CODES.get(status),
            status_code=status,
            error_type="invalid_request_error" if status < 500 else "server_error",
        )
        return error_response(error, headers=headers, path=request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        return unexpected_error_response(request)


def allowed_methods(request: StarletteRequest) -> list[str]:
    """Every HTTP method some declared route serves on the request's path (the routes
    ``create_app`` keeps in ``app.state.api_routes``)."""
    routes: Sequence[APIRoute] = getattr(request.app.state, "api_routes", ())
    path = request.url.path
    methods = {m for r in routes if r.path_regex.match(path) for m in r.methods or ()}
    return sorted(methods)


def unexpected_error_response(request: StarletteRequest) -> Response:
    """A 500 for an exception nothing else handled (logged here, with its traceback)."""
    request_id = getattr(request.state, "request_id", None)
    log.exception("unhandled error", path=request.url.path)
    error = ApiError(
        f"The server had an error while processing the request (request id {request_id}).",
        status_code=500,
        error_type="server_error",
    )
    return error_response(error, path=request.url.path)
