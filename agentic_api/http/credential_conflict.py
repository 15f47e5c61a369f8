"""Refuses a request whose ``Authorization: Bearer`` and ``x-api-key`` headers name
different keys, on every route (HTTP and WebSocket), before any route reads either.

Each route family reads one of the two (the OpenAI routes ``Authorization``, the Anthropic
route ``x-api-key`` first): two that disagree would run the request under whichever the
route happens to read, while a proxy or a client believes the other. The same key in both
is what some clients send, and is accepted.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from agentic_api.errors import InvalidRequest
from agentic_api.http.auth import bearer_token
from agentic_api.http.errors import error_response

_AUTHORIZATION = b"authorization"
_API_KEY = b"x-api-key"


def conflicting_credentials(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the two credential headers are both there, once each, and disagree.
    (A repeated header is the routes' own refusal: ``auth.credential_header``.)"""
    authorization = [value for name, value in headers if name == _AUTHORIZATION]
    api_key = [value for name, value in headers if name == _API_KEY]
    if len(authorization) != 1 or len(api_key) != 1:
        return False
    token = bearer_token(authorization[0].decode("latin-1"))
    return token != api_key[0].decode("latin-1").strip()


def conflict_error() -> InvalidRequest:
    return InvalidRequest(
        "The 'Authorization' and 'x-api-key' headers name different API keys; send one "
        "of them, or the same key in both.",
        code="conflicting_credentials",
    )


class CredentialConflictMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not conflicting_credentials(
            scope["headers"]
        ):
            await self.app(scope, receive, send)
            return
        response = error_response(conflict_error(), path=scope["path"])
        if scope["type"] == "http":
            await response(scope, receive, send)
        else:
            await WebSocket(scope, receive, send).send_denial_response(response)
