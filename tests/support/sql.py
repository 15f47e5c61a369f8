"""Raw SQL against a test database (to inspect it, or to play a crashed process)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from agentic_api.storage.database import Database


def execute(db_url: str, sql: str, **params: object) -> None:
    async def run() -> None:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                await session.execute(text(sql), params)
        finally:
            await db.close()

    asyncio.run(run())


def rows(db_url: str, sql: str, **params: object) -> Sequence[Any]:
    async def run() -> Sequence[Any]:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.read() as session:
                return (await session.execute(text(sql), params)).all()
        finally:
            await db.close()

    return asyncio.run(run())


def scalar(db_url: str, sql: str, **params: object) -> Any:
    found = rows(db_url, sql, **params)
    return found[0][0] if found else None
