"""Bearer-key authentication: reading the key from the request; ``serving.tenants`` says
whose it is. The tenant comes from the key, never from a client header."""

from __future__ import annotations

from fastapi import Request
from starlette.requests import HTTPConnection

from agentic_api.errors import InvalidRequest, Unauthorized
from agentic_api.runtime import Runtime
from agentic_api.serving.tenants import KeyMemo, TenantContext, authenticate_token, is_admin_key


def services_of(connection: HTTPConnection) -> Runtime:
    services: Runtime = connection.app.state.services
    return services


def credential_header(connection: HTTPConnection, name: str = "authorization") -> str | None:
    """The one value of a credential header. Several are refused rather than the first
    believed: a proxy that adds its own, or a client that sends two, would otherwise have
    the request run under whichever key came first."""
    values = connection.headers.getlist(name)
    if len(values) > 1:
        raise InvalidRequest(
            f"The request has {len(values)} '{name}' headers; send exactly one.",
            code=f"duplicate_{name.replace('-', '_')}_header",
        )
    return values[0] if values else None


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def authenticate(services: Runtime, memo: KeyMemo, header: str | None) -> TenantContext:
    return await authenticate_token(services, memo, bearer_token(header))


async def require_tenant(request: Request) -> TenantContext:
    services = services_of(request)
    memo: KeyMemo = request.app.state.key_memo
    return await authenticate(services, memo, credential_header(request))


async def require_admin(request: Request) -> None:
    services = services_of(request)
    token = bearer_token(credential_header(request))
    if token is None:
        raise Unauthorized("This route needs an admin key.", code="missing_api_key")
    if not await is_admin_key(services, token):
        raise Unauthorized("Incorrect admin key provided.")
