"""``/openapi.json`` made true to the server: it is what client generators and fuzzers read.

FastAPI's document says 422 for validation errors (ours are OpenAI-shaped 400s), omits
the 401s and 404s every route can answer, and leaves the ``$defs`` of request bodies
documented through ``openapi_extra`` unresolvable. One pass over the generated document
fixes all three, so no route has to remember to.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from agentic_api.wire import anthropic
from agentic_api.wire.errors import ErrorBody

_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
_ANTHROPIC_ERROR_REF = {"$ref": "#/components/schemas/AnthropicErrorBody"}
# The Messages API's routes answer errors in Anthropic's shape (http/errors.py).
_ANTHROPIC_ERROR_BODY = {
    "title": "AnthropicErrorBody",
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}
# One server-sent event (its data is the event's JSON text).
_SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}
# Routes that answer 200 with an event stream when asked to (stream: true).
_STREAMING = {
    ("/v1/responses", "post"),
    ("/v1/responses/{response_id}", "get"),
    ("/v1/messages", "post"),
}
# Routes anyone may call: no key, so no 401.
_PUBLIC = frozenset({"/health", "/ready", "/metrics"})
# Routes that ask the model server, which can refuse (its 4xx pass through) or fail.
_UPSTREAM = frozenset(
    {
        "/v1/responses",
        "/v1/responses/input_tokens",
        "/v1/responses/compact",
        "/v1/models",
        "/v1/models/{model_id}",
        "/v1/messages",
        "/v1/messages/count_tokens",
    }
)
_WHY = {
    "400": "Invalid parameters or body (OpenAI's error shape; Anthropic's on /v1/messages)",
    "401": "Missing or unknown key",
    "404": "No such object (another tenant's is not found either)",
    "4XX": "Any other client error (conflicts, limits, a refused upstream request)",
    "5XX": "The model server or the database failed",
}


def install_openapi(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = true_document(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def true_document(document: dict[str, Any]) -> dict[str, Any]:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    _hoist_definitions(document, schemas)
    error_body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, schema in error_body.pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas.setdefault("ErrorBody", error_body)
    schemas.setdefault("AnthropicErrorBody", _ANTHROPIC_ERROR_BODY)
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            _document_errors(path, operation)
            if (path, method) in _STREAMING:
                content = operation["responses"].setdefault("200", {}).setdefault("content", {})
                content.setdefault("text/event-stream", {"schema": _SSE_EVENT})
    return document


def _document_errors(path: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses.pop("422", None)
    # Any route: 400 for a URL carrying NUL (http/middleware.py), if nothing else.
    statuses = ["400"] if path in _PUBLIC else ["400", "401", "404", "4XX"]
    if path in _UPSTREAM:
        statuses.append("5XX")
    shape = _ANTHROPIC_ERROR_REF if anthropic.is_anthropic_path(path) else _ERROR_REF
    for status in statuses:
        entry = responses.setdefault(status, {"description": _WHY[status]})
        entry.setdefault("content", {"application/json": {"schema": shape}})
    if path == "/ready":
        responses.setdefault("503", {"description": "The database or the model server is down"})


def _hoist_definitions(document: dict[str, Any], schemas: dict[str, Any]) -> None:
    """Moves every nested ``$defs`` into ``components.schemas`` and points its
    references there (pydantic's model schemas keep their definitions local)."""
    pending: list[Any] = [document]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for name, schema in node.pop("$defs", {}).items():
                schemas.setdefault(name, schema)
                pending.append(schema)
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                node["$ref"] = "#/components/schemas/" + ref.removeprefix("#/$defs/")
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
