"""Creating tenants and keys directly in a test database."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from agentic_api.storage.database import Database
from agentic_api.storage.tenants import TenantRepository


@dataclass(frozen=True)
class TenantKeys:
    id: str
    name: str
    api_key: str


def create_tenant(db_url: str, name: str | None = None) -> TenantKeys:
    name = name or f"tenant-{uuid.uuid4().hex[:8]}"

    async def run() -> TenantKeys:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                repo = TenantRepository(session)
                tenant = await repo.create(name)
                key = await repo.issue_key(tenant)
                return TenantKeys(tenant.id, name, key.plaintext)
        finally:
            await db.close()

    return asyncio.run(run())


def create_admin_key(db_url: str) -> str:
    async def run() -> str:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                return (await TenantRepository(session).issue_admin_key("test")).plaintext
        finally:
            await db.close()

    return asyncio.run(run())
