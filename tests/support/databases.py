"""Fresh databases for tests, built by running the real migrations."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import asyncpg

PG_ADMIN_DSN = os.environ.get("AGENTIC_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def sqlite_url(folder: Path) -> str:
    return f"sqlite+aiosqlite:///{folder / f'test-{uuid.uuid4().hex[:8]}.db'}"


def create_pg_database() -> tuple[str, str]:
    """Creates an empty PostgreSQL database; returns (name, SQLAlchemy URL)."""
    name = f"agentic_test_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return name, f"{base}/{name}"


def drop_pg_database(name: str) -> None:
    async def drop() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(drop())


def pg_dsn(url: str) -> str:
    """asyncpg's form of a SQLAlchemy PostgreSQL URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def run_on_pg(url: str, sql: str) -> None:
    """Runs one statement on a connection of its own (outside any test's event loop)."""

    async def run() -> None:
        connection = await asyncpg.connect(pg_dsn(url))
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    asyncio.run(run())
