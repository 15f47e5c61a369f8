"""Who may open the console: an active admin key, and only while one exists."""

from __future__ import annotations

from agentic_api.services import Services
from agentic_api.storage.console import ConsoleRepository


async def console_open(services: Services) -> bool:
    """Whether any admin key is active (no admin key: no console at all)."""
    async with services.db.read() as session:
        return await ConsoleRepository(session).any_admin_key()


async def admin_key_for(services: Services, plaintext: str) -> str | None:
    """The id of the active admin key typed at login; None for anything else, tenant
    keys included."""
    async with services.db.read() as session:
        return await ConsoleRepository(session).admin_key_id(plaintext)


async def admin_key_active(services: Services, key_id: str) -> bool:
    """Whether the key a login was made with is still active (a revoked key ends every
    console session opened with it)."""
    async with services.db.read() as session:
        return await ConsoleRepository(session).admin_key_active(key_id)
