"""Who is asking: an API key's tenant (or single-tenant mode's), and whether a key is the
admin key. The tenant comes from the key, never from a client header."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agentic_api.errors import Unauthorized
from agentic_api.runtime import Services
from agentic_api.storage.models import Tenant
from agentic_api.storage.tenants import TenantRepository, hash_key
from lineage import mint_cache_salt

LOCAL_TENANT_NAME = "local"
# Resolved keys are reused this long; a revoked key stops working within this window.
KEY_MEMO_SECONDS = 5.0


@dataclass(frozen=True)
class TenantContext:
    id: str
    name: str
    salt_epoch: int
    cache_salt: str = field(repr=False)


class KeyMemo:
    """Resolved API keys, each for KEY_MEMO_SECONDS (a memo: "cache" in this project
    means the KV cache)."""

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
        self._entries[key_hash] = (time.monotonic() + KEY_MEMO_SECONDS, tenant)

    def clear(self) -> None:
        self._entries.clear()


async def authenticate_token(
    services: Services,
    memo: KeyMemo,
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
    cached = memo.get(key_hash)
    if cached is not None:
        return cached
    async with services.db.read() as session:
        tenant = await TenantRepository(session).resolve_key(token)
    if tenant is None:
        raise Unauthorized("Incorrect API key provided.")
    context = _context(services, tenant)
    memo.put(key_hash, context)
    return context


async def active_tenant(services: Services, tenant_id: str) -> TenantContext | None:
    """The tenant as it stands now (its current salt), or None when it is gone or disabled:
    for work the server does on a tenant's behalf with no request to authenticate."""
    async with services.db.read() as session:
        tenant = await TenantRepository(session).get(tenant_id)
    if tenant is None or tenant.disabled_at is not None:
        return None
    return _context(services, tenant)


async def _tenant_by_name(services: Services, name: str) -> TenantContext:
    async with services.db.read() as session:
        tenant = await TenantRepository(session).by_name(name)
    if tenant is None or tenant.disabled_at is not None:
        raise Unauthorized(f"The single-tenant mode's tenant {name!r} is missing or disabled.")
    return _context(services, tenant)


def _context(services: Services, tenant: Tenant) -> TenantContext:
    return TenantContext(
        tenant.id,
        tenant.name,
        tenant.salt_epoch,
        mint_cache_salt(services.secret, tenant.id, tenant.salt_epoch),
    )


async def is_admin_key(services: Services, token: str) -> bool:
    async with services.db.read() as session:
        return await TenantRepository(session).is_admin_key(token)
