"""The unit of work: one place that opens transactions and commits them, once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from agentic_api.errors import ApiError
from agentic_api.metrics import DB_STATEMENTS, DB_TRANSACTION_DURATION
from agentic_api.storage.engine import create_engine


class DatabaseBusy(ApiError):
    status_code = 503
    error_type = "server_error"
    code = "database_busy"


class Database:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        event.listen(engine.sync_engine, "before_cursor_execute", _count_statement)
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
        started = time.perf_counter()
        try:
            async with self._reader() as session:
                yield session
        finally:
            DB_TRANSACTION_DURATION.labels("read").observe(time.perf_counter() - started)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction committed on clean exit, rolled back on any error."""
        started = time.perf_counter()
        try:
            async with self._transaction() as session:
                yield session
        finally:
            DB_TRANSACTION_DURATION.labels("write").observe(time.perf_counter() - started)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncSession]:
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


def _count_statement(*_args: Any) -> None:
    DB_STATEMENTS.inc()
