"""The unit of work: one place that opens transactions and commits them, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from agentic_api.errors import ApiError
from agentic_api.storage.engine import create_engine


class DatabaseBusy(ApiError):
    status_code = 503
    error_type = "server_error"
    code = "database_busy"


class Database:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._reader = async_sessionmaker(engine, expire_on_commit=False)
        writer_engine = engine.execution_options(sqlite_begin="IMMEDIATE")
        self._writer = async_sessionmaker(writer_engine, expire_on_commit=False)

    @classmethod
    def from_url(cls, url: str, *, pool_size: int = 10) -> Database:
        return cls(create_engine(url, pool_size=pool_size))

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A session for reads; closing it releases (and rolls back) its connection while
        the objects it loaded stay usable."""
        async with self._reader() as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction committed on clean exit, rolled back on any error."""
        async with self._writer() as session:
            try:
                yield session
                await session.commit()
            except DBAPIError as exc:
                await session.rollback()
                if _is_lock_timeout(exc):
                    raise DatabaseBusy("the database is busy; retry the request") from exc
                raise
            except BaseException:
                await session.rollback()
                raise

    async def ping(self) -> None:
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def close(self) -> None:
        await self.engine.dispose()


def _is_lock_timeout(exc: DBAPIError) -> bool:
    message = str(exc.orig).lower()
    return "database is locked" in message or "lock timeout" in message
