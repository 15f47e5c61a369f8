"""Tenants, their API keys and the separate admin keys. Keys are stored only as hashes."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import AdminKey, ApiKey, Tenant
from agentic_api.storage.types import utcnow
from lineage import IdKind, mint_id

TENANT_KEY_PREFIX = "sk-agentic-"
ADMIN_KEY_PREFIX = "sk-agentic-admin-"
_DISPLAY_CHARS = 6


def hash_key(plaintext: str) -> str:
    # Keys are 256-bit random tokens, so a plain digest is enough (no password stretching).
    return hashlib.sha256(plaintext.encode()).hexdigest()


def admin_display_prefix(typed: str) -> str:
    """What an admin key typed at a login shows of itself (as the key lists show an admin
    key): its first characters, bounded whatever was typed."""
    return typed[: len(ADMIN_KEY_PREFIX) + _DISPLAY_CHARS]


def _new_key(prefix: str) -> tuple[str, str]:
    plaintext = prefix + secrets.token_urlsafe(32)
    return plaintext, plaintext[: len(prefix) + _DISPLAY_CHARS]


@dataclass(frozen=True)
class IssuedKey:
    id: str
    plaintext: str
    display_prefix: str


class TenantRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def create(self, name: str) -> Tenant:
        tenant = Tenant(id=mint_id(IdKind.TENANT), name=name, created_at=utcnow(), salt_epoch=1)
        self.session.add(tenant)
        await self.session.flush()
        return tenant

    async def get(self, tenant_id: str) -> Tenant | None:
        return await self.session.get(Tenant, tenant_id)

    async def by_name(self, name: str) -> Tenant | None:
        result = await self.session.execute(select(Tenant).where(Tenant.name == name))
        return result.scalar_one_or_none()

    async def by_name_or_id(self, ref: str) -> Tenant | None:
        return await self.get(ref) or await self.by_name(ref)

    async def list(self, *, after: str | None = None, limit: int = 100) -> Sequence[Tenant]:
        query = select(Tenant).order_by(Tenant.id).limit(limit)
        if after is not None:
            query = query.where(Tenant.id > after)
        return (await self.session.execute(query)).scalars().all()

    async def set_disabled(self, tenant: Tenant, disabled: bool) -> None:
        tenant.disabled_at = utcnow() if disabled else None
        await self.session.flush()

    async def issue_key(self, tenant: Tenant, name: str | None = None) -> IssuedKey:
        plaintext, display = _new_key(TENANT_KEY_PREFIX)
        key = ApiKey(
            id=mint_id(IdKind.API_KEY),
            tenant_id=tenant.id,
            key_hash=hash_key(plaintext),
            key_prefix=display,
            name=name,
            created_at=utcnow(),
        )
        self.session.add(key)
        await self.session.flush()
        return IssuedKey(key.id, plaintext, display)

    async def keys(self, tenant_id: str) -> Sequence[ApiKey]:
        query = select(ApiKey).where(ApiKey.tenant_id == tenant_id).order_by(ApiKey.id)
        return (await self.session.execute(query)).scalars().all()

    async def revoke_key(self, key_id: str) -> bool:
        result = await self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def resolve_key(self, plaintext: str) -> Tenant | None:
        """The active tenant owning an active key, or None."""
        query = (
            select(Tenant)
            .join(ApiKey, ApiKey.tenant_id == Tenant.id)
            .where(
                ApiKey.key_hash == hash_key(plaintext),
                ApiKey.revoked_at.is_(None),
                Tenant.disabled_at.is_(None),
            )
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def issue_admin_key(self, name: str | None = None) -> IssuedKey:
        plaintext, display = _new_key(ADMIN_KEY_PREFIX)
        key = AdminKey(
            id=mint_id(IdKind.ADMIN_KEY),
            key_hash=hash_key(plaintext),
            key_prefix=display,
            name=name,
            created_at=utcnow(),
        )
        self.session.add(key)
        await self.session.flush()
        return IssuedKey(key.id, plaintext, display)

    async def revoke_admin_key(self, key_id: str) -> bool:
        result = await self.session.execute(
            update(AdminKey)
            .where(AdminKey.id == key_id, AdminKey.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def is_admin_key(self, plaintext: str) -> bool:
        query = select(AdminKey.id).where(
            AdminKey.key_hash == hash_key(plaintext), AdminKey.revoked_at.is_(None)
        )
        return (await self.session.execute(query)).first() is not None
