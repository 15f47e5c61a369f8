"""Bearer-key authentication. The tenant comes from the key, never from a client header."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastapi import Request
from starlette.requests import HTTPConnection

from agentic_api.errors import InvalidRequest, Unauthorized
from agentic_api.services import Services
from agentic_api.storage.tenants import TenantRepository, hash_key
from lineage import mint_cache_salt

LOCAL_TENANT_NAME = "local"
# Resolved keys are reused this long; a revoked key stops working within this window.
KEY_CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class TenantContext:
    id: str
    name: str
    salt_epoch: int
    cache_salt: str = field(repr=False)


def services_of(connection: HTTPConnection) -> Services:
    services: Services = connection.app.state.services
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


class KeyCache:
    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, TenantContext]] = {}

    def get(self, key_hash: str) -> TenantContext | None:
        entry = self._entries.get(key_hash)
        if entry is None or entry[0] < time.monotonic():
            self._entries.pop(key_hash, None)
            return None
        return entry[1]

    def put(self, key_hash: str, tenant: TenantContext) -> None:
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[key_hash] = (time.monotonic() + KEY_CACHE_SECONDS, tenant)

    def clear(self) -> None:
        self._entries.clear()


async def authenticate(services: Services, cache: KeyCache, header: str | None) -> TenantContext:
    return await authenticate_token(services, cache, bearer_token(header))


async def authenticate_token(
    services: Services,
    cache: KeyCache,
    token: str | None,
    *,
    how_to_send: str = "as 'Authorization: Bearer <key>'",
) -> TenantContext:
    """The tenant of an API key however it was sent (``how_to_send`` is for the error
    message when none was)."""
    if token is None and services.settings.single_tenant:
        return await _tenant_by_name(services, LOCAL_TENANT_NAME)
    if token is None:
        raise Unauthorized(
            f"You didn't provide an API key. Send it {how_to_send}.",
            code="missing_api_key",
        )
    key_hash = hash_key(token)
    cached = cache.get(key_hash)
    if cached is not None:
        return cached
    async with services.db.read() as session:
        tenant = await TenantRepository(session).resolve_key(token)
    if tenant is None:
        raise Unauthorized("Incorrect API key provided.")
    context = TenantContext(
        tenant.id,
        tenant.name,
        tenant.salt_epoch,
        mint_cache_salt(services.secret, tenant.id, tenant.salt_epoch),
    )
    cache.put(key_hash, context)
    return context


async def _tenant_by_name(services: Services, name: str) -> TenantContext:
    async with services.db.read() as session:
        tenant = await TenantRepository(session).by_name(name)
    if tenant is None or tenant.disabled_at is not None:
        raise Unauthorized(f"The single-tenant mode's tenant {name!r} is missing or disabled.")
    return TenantContext(
        tenant.id,
        tenant.name,
        tenant.salt_epoch,
        mint_cache_salt(services.secret, tenant.id, tenant.salt_epoch),
    )


async def require_tenant(request: Request) -> TenantContext:
    services = services_of(request)
    cache: KeyCache = request.app.state.key_cache
    return await authenticate(services, cache, credential_header(request))


async def require_admin(request: Request) -> None:
    services = services_of(request)
    token = bearer_token(credential_header(request))
    if token is None:
        raise Unauthorized("This route needs an admin key.", code="missing_api_key")
    async with services.db.read() as session:
        ok = await TenantRepository(session).is_admin_key(token)
    if not ok:
        raise Unauthorized("Incorrect admin key provided.")
