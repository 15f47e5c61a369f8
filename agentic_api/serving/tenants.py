"""Who is asking: an API key's tenant (or single-tenant mode's), and whether a key is the
admin key. The tenant comes from the key, never from a client header."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agentic_api.errors import Unauthorized
from agentic_api.log import get_logger
from agentic_api.runtime import Runtime
from agentic_api.storage.models import Tenant
from agentic_api.storage.tenants import TenantRepository, hash_key
from agentic_api.turns.data.caller import Caller
from lineage import mint_cache_salt

log = get_logger("agentic_api.tenants")

LOCAL_TENANT_NAME = "local"
# Resolved keys are reused this long; a revoked key stops working within this window.
KEY_MEMO_SECONDS = 5.0
# A key used this close to the end of its entry is looked up again in the background.
KEY_REFRESH_AHEAD_SECONDS = 1.0


@dataclass(frozen=True)
class TenantContext:
    id: str
    name: str
    salt_epoch: int
    cache_salt: str = field(repr=False)


def caller_of(tenant: TenantContext) -> Caller:
    """The turn's caller: the tenant, and the salt (with its epoch) its prompts are keyed under."""
    return Caller(tenant.id, tenant.salt_epoch, tenant.cache_salt)


class KeyMemo:
    """Resolved API keys, each for KEY_MEMO_SECONDS (a memo: "cache" in this project
    means the KV cache).

    A key not in the memo is looked up once however many requests ask at the same time:
    the others wait for that lookup. Without it, every request that arrived before the
    first lookup ended read the database itself, and on a busy server the reads of a
    burst (each memo expiry under a steady load) queued behind one another: at 64
    concurrent streams, the slowest requests waited ~100 ms for their key
    (docs/benchmarks/streaming/README.md at commit 6a12cfe). A key asked for in the last
    KEY_REFRESH_AHEAD_SECONDS of its entry is answered from the memo and looked up again
    meanwhile, so that under steady traffic no request waits for that read; the entry
    still ends when its time is up, and a lookup that finds the key gone (revoked, its
    tenant disabled) drops it at once. ``clear`` (a tenant changed) forgets the lookups
    in flight too: a request after it never gets an answer read before it."""

    def __init__(
        self,
        seconds: float = KEY_MEMO_SECONDS,
        refresh_ahead_seconds: float = KEY_REFRESH_AHEAD_SECONDS,
    ) -> None:
        self._seconds = seconds
        self._refresh_ahead = refresh_ahead_seconds
        self._entries: dict[str, tuple[float, TenantContext]] = {}
        self._lookups: dict[str, asyncio.Task[TenantContext | None]] = {}

    def get(self, key_hash: str) -> TenantContext | None:
        entry = self._entries.get(key_hash)
        if entry is None or entry[0] < time.monotonic():
            self._entries.pop(key_hash, None)
            return None
        return entry[1]

    def put(self, key_hash: str, tenant: TenantContext) -> None:
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[key_hash] = (time.monotonic() + self._seconds, tenant)

    async def resolve(
        self, key_hash: str, lookup: Callable[[], Awaitable[TenantContext | None]]
    ) -> TenantContext | None:
        """The key's tenant (None: no such key), from the memo, the lookup in flight for
        it, or ``lookup``, whose answer is memoized."""
        entry = self._entries.get(key_hash)
        if entry is not None:
            ends, tenant = entry
            left = ends - time.monotonic()
            if left >= 0:
                if left < self._refresh_ahead and key_hash not in self._lookups:
                    self._start_lookup(key_hash, lookup).add_done_callback(_retrieved)
                return tenant
            del self._entries[key_hash]
        pending = self._lookups.get(key_hash) or self._start_lookup(key_hash, lookup)
        # A waiter that is cancelled (its client left) does not cancel the others' lookup.
        return await asyncio.shield(pending)

    def _start_lookup(
        self, key_hash: str, lookup: Callable[[], Awaitable[TenantContext | None]]
    ) -> asyncio.Task[TenantContext | None]:
        task = asyncio.ensure_future(self._looked_up(key_hash, lookup))
        self._lookups[key_hash] = task
        return task

    async def _looked_up(
        self, key_hash: str, lookup: Callable[[], Awaitable[TenantContext | None]]
    ) -> TenantContext | None:
        try:
            tenant = await lookup()
        finally:
            current = self._lookups.get(key_hash) is asyncio.current_task()
            if current:
                del self._lookups[key_hash]
        # Nothing is memoized when a clear came meanwhile (this is no longer the lookup).
        if current:
            if tenant is None:
                self._entries.pop(key_hash, None)
            else:
                self.put(key_hash, tenant)
        return tenant

    def clear(self) -> None:
        self._entries.clear()
        self._lookups.clear()


def _retrieved(lookup: asyncio.Task[TenantContext | None]) -> None:
    # A refresh nobody waits for: its failure (the database unavailable) is not lost
    # silently; the entry ends on time and the next request's own lookup answers it.
    if not lookup.cancelled() and (error := lookup.exception()) is not None:
        log.warning("api key refresh failed", error=type(error).__name__)


async def authenticate_token(
    services: Runtime,
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

    async def lookup() -> TenantContext | None:
        async with services.db.read() as session:
            tenant = await TenantRepository(session).resolve_key(token)
        return None if tenant is None else _context(services, tenant)

    context = await memo.resolve(hash_key(token), lookup)
    if context is None:
        raise Unauthorized("Incorrect API key provided.")
    return context


async def active_tenant(services: Runtime, tenant_id: str) -> TenantContext | None:
    """The tenant as it stands now (its current salt), or None when it is gone or disabled:
    for work the server does on a tenant's behalf with no request to authenticate."""
    async with services.db.read() as session:
        tenant = await TenantRepository(session).get(tenant_id)
    if tenant is None or tenant.disabled_at is not None:
        return None
    return _context(services, tenant)


async def _tenant_by_name(services: Runtime, name: str) -> TenantContext:
    async with services.db.read() as session:
        tenant = await TenantRepository(session).by_name(name)
    if tenant is None or tenant.disabled_at is not None:
        raise Unauthorized(f"The single-tenant mode's tenant {name!r} is missing or disabled.")
    return _context(services, tenant)


def _context(services: Runtime, tenant: Tenant) -> TenantContext:
    return TenantContext(
        tenant.id,
        tenant.name,
        tenant.salt_epoch,
        mint_cache_salt(services.secret, tenant.id, tenant.salt_epoch),
    )


async def is_admin_key(services: Runtime, token: str) -> bool:
    async with services.db.read() as session:
        return await TenantRepository(session).is_admin_key(token)
