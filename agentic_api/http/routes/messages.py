"""The Anthropic Messages API: ``POST /v1/messages`` (JSON or SSE) and
``POST /v1/messages/count_tokens``, for the ``anthropic`` SDKs and Claude Code.

Anthropic's conventions at the door: the key in ``x-api-key`` (or ``Authorization:
Bearer``), the ``anthropic-version`` header required, errors as ``{"type": "error",
"error": {"type", "message"}}`` (rendered by ``http/errors.py`` for these paths).
Claude Code adds ``?beta=true`` to the path; query parameters are not ours to act on.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response, StreamingResponse

from agentic_api.http.auth import bearer_token, credential_header, services_of
from agentic_api.http.sse import SSE_HEADERS
from agentic_api.serving import messages as serving
from agentic_api.serving.tenants import KeyMemo, TenantContext, authenticate_token
from agentic_api.wire.anthropic import (
    BETA_HEADER,
    CLIENT_SESSION_HEADER,
    VERSION_HEADER,
    check_beta,
    check_version,
    client_session,
    parse_messages_request,
)

router = APIRouter(tags=["messages"])

_HEADERS = (
    ("x-api-key", False, "The tenant's API key (or send 'Authorization: Bearer <key>')."),
    (VERSION_HEADER, True, "Anthropic API version, e.g. 2023-06-01."),
    (BETA_HEADER, False, "Comma-separated beta flags, passed to the model server as sent."),
    (CLIENT_SESSION_HEADER, False, "The client's session (Claude Code sends it)."),
)
# Documented here rather than declared as parameters: the route reads the raw headers
# and body itself, so that its errors come in Anthropic's shape and its body is
# forwarded as sent.
_OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": name,
            "in": "header",
            "required": required,
            "schema": {"type": "string"},
            "description": text,
        }
        for name, required, text in _HEADERS
    ],
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
}


async def anthropic_tenant(request: Request) -> TenantContext:
    memo: KeyMemo = request.app.state.key_memo
    # Both read, so a repeated header is refused whichever of them carries the key.
    api_key, bearer = credential_header(request, "x-api-key"), credential_header(request)
    token = api_key or bearer_token(bearer)
    return await authenticate_token(
        services_of(request),
        memo,
        token.strip() if token and token.strip() else None,
        how_to_send="in the 'x-api-key' header (or as 'Authorization: Bearer <key>')",
    )


async def _prepare(request: Request, *, counting: bool) -> serving.PreparedMessage:
    # Anthropic's order: who is asking, then which API version, then what is asked.
    tenant = await anthropic_tenant(request)
    version = check_version(request.headers.get(VERSION_HEADER))
    beta = check_beta(request.headers.get(BETA_HEADER))
    session = client_session(request.headers.get(CLIENT_SESSION_HEADER))
    body = parse_messages_request(await request.body(), counting=counting)
    return serving.prepare(
        tenant,
        body,
        version=version,
        beta=beta,
        client_session_id=session,
    )


@router.post(
    "/v1/messages",
    summary="Create a message (Anthropic Messages API; SSE with stream: true)",
    openapi_extra=_OPENAPI,
)
async def messages(request: Request) -> Response:
    answer = await serving.answer_message(
        services_of(request), await _prepare(request, counting=False)
    )
    if isinstance(answer, bytes):
        return Response(answer, media_type="application/json")
    return StreamingResponse(answer.frames(), media_type="text/event-stream", headers=SSE_HEADERS)


@router.post(
    "/v1/messages/count_tokens",
    summary="Count a message request's input tokens (Anthropic Messages API)",
    openapi_extra=_OPENAPI,
)
async def count_tokens(request: Request) -> Response:
    turn = await _prepare(request, counting=True)
    return Response(
        await serving.count_tokens(services_of(request), turn), media_type="application/json"
    )
