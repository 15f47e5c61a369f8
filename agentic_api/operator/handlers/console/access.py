"""Who may open the console: an active admin key, and only while one exists; and the
logouts that end a console session."""

from __future__ import annotations

from datetime import UTC, datetime

from agentic_api.operator.queries.console import ConsoleRepository
from agentic_api.runtime import Runtime
from agentic_api.storage.tenants import admin_display_prefix


def login_key_prefix(typed: str) -> str:
    """The key prefix a login attempt is counted under (console login limits): the part of
    an admin key its lists display, so that guesses at one key are limited together from
    whatever addresses they come."""
    return admin_display_prefix(typed)


async def console_open(services: Runtime) -> bool:
    """Whether any admin key is active (no admin key: no console at all)."""
    async with services.db.read() as session:
        return await ConsoleRepository(session).any_admin_key()


async def admin_key_for(services: Runtime, plaintext: str) -> str | None:
    """The id of the active admin key typed at login; None for anything else, tenant
    keys included."""
    async with services.db.read() as session:
        return await ConsoleRepository(session).admin_key_id(plaintext)


async def login_active(services: Runtime, key_id: str, nonce: str) -> bool:
    """Whether a login still counts: the key it was made with is still active (a revoked
    key ends every console session opened with it) and this session has not logged out."""
    async with services.db.read() as session:
        return await ConsoleRepository(session).login_active(key_id, nonce)


async def end_login(services: Runtime, nonce: str, *, expires: int, now: int) -> None:
    """Log one console session out in every process: its cookie, copied or not, is
    refused from now on."""
    async with services.db.write() as session:
        await ConsoleRepository(session).end_login(
            nonce,
            expires_at=datetime.fromtimestamp(expires, UTC),
            now=datetime.fromtimestamp(now, UTC),
        )
