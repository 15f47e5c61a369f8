"""The unit of work: one place that opens transactions and commits them, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import cached_property
from typing import Any

from sqlalchemy import event, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from agentic_api.metrics import DB_STATEMENTS
from agentic_api.storage.engine import create_engine
from agentic_api.storage.errors import DatabaseBusy
from agentic_api.storage.migrate import require_current
from agentic_api.storage.sqlite.change_mark import ChangeMark, Mark
from agentic_api.storage.timing import timed_transaction
from agentic_api.storage.turn_store import TurnStore, open_turn_store

__all__ = ["Database", "DatabaseBusy"]

# Where alembic keeps the revision a database is at (its default name).
VERSION_TABLE = "alembic_version"


class Database:
    """Sessions over one database. On SQLite the short reads on a turn's critical path get
    sessions of their own, whose statements run on the event loop's thread (``turn_read``,
    see ``storage/sqlite/drivers.py``); elsewhere ``turn_read`` is ``read``."""

    def __init__(self, engine: AsyncEngine, turn_engine: AsyncEngine | None = None) -> None:
        self.engine = engine
        self.turn_engine = turn_engine or engine
        self.dialect = engine.dialect.name
        self._reader, self._writer = _sessionmakers(engine)
        self._turn_reader, _ = _sessionmakers(self.turn_engine)
        for counted in {engine, self.turn_engine}:
            event.listen(counted.sync_engine, "before_cursor_execute", _count_statement)
        database = engine.url.database
        self._change_mark = ChangeMark(database) if self.is_sqlite and database else None

    @classmethod
    def from_url(cls, url: str, *, pool_size: int = 10) -> Database:
        engine = create_engine(url, pool_size=pool_size)
        if engine.dialect.name != "sqlite":
            return cls(engine)
        return cls(engine, create_engine(url, pool_size=pool_size, inline=True))

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @cached_property
    def turns(self) -> TurnStore:
        """A turn's checkpoint read and plain insert (``storage/turn_store/``)."""
        return open_turn_store(self.turn_engine, self)

    def change_mark(self) -> Mark | None:
        """A value that changes whenever anyone (any connection, any process) commits to
        the database: two equal marks mean nothing was committed between the two calls.
        None when this database cannot tell (PostgreSQL) or could not this time; then the
        caller must look."""
        return None if self._change_mark is None else self._change_mark.read()

    def read(self) -> AbstractAsyncContextManager[AsyncSession]:
        """A session for reads; closing it releases (and rolls back) its connection while
        the objects it loaded stay usable."""
        return self._read(self._reader)

    def write(self) -> AbstractAsyncContextManager[AsyncSession]:
        """A write transaction committed on clean exit, rolled back on any error."""
        return self._write(self._writer)

    def turn_read(self) -> AbstractAsyncContextManager[AsyncSession]:
        """``read`` for a few small statements on a turn's critical path (read only)."""
        return self._read(self._turn_reader)

    @asynccontextmanager
    async def _read(
        self, sessions: async_sessionmaker[AsyncSession]
    ) -> AsyncIterator[AsyncSession]:
        with timed_transaction("read"):
            async with sessions() as session:
                yield session

    @asynccontextmanager
    async def _write(
        self, sessions: async_sessionmaker[AsyncSession]
    ) -> AsyncIterator[AsyncSession]:
        with timed_transaction("write"):
            async with sessions() as session:
                try:
                    yield session
                    await session.commit()
                except BaseException:
                    await session.rollback()
                    raise

    async def ping(self) -> None:
        """Raises unless the database answers with this release's schema
        (``SchemaNotCurrent``: never migrated, behind or ahead)."""
        require_current(await self.schema_revisions())

    async def schema_revisions(self) -> frozenset[str] | None:
        """The revisions in ``alembic_version``, or ``None`` when there is no such table
        (a database never migrated)."""
        async with self.read() as session:
            connection = await session.connection()
            exists = await connection.run_sync(lambda sync: inspect(sync).has_table(VERSION_TABLE))
            if not exists:
                return None
            rows = await connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
            return frozenset(str(row[0]) for row in rows)

    async def close(self) -> None:
        if self._change_mark is not None:
            self._change_mark.close()
        if "turns" in self.__dict__:
            await self.turns.close()
        await self.engine.dispose()
        if self.turn_engine is not self.engine:
            await self.turn_engine.dispose()


def _sessionmakers(
    engine: AsyncEngine,
) -> tuple[async_sessionmaker[AsyncSession], async_sessionmaker[AsyncSession]]:
    """Readers, and writers that take SQLite's write lock when they begin."""
    writer_engine = engine.execution_options(sqlite_begin="IMMEDIATE")
    return (
        async_sessionmaker(engine, expire_on_commit=False),
        async_sessionmaker(writer_engine, expire_on_commit=False),
    )


def _count_statement(*_args: Any) -> None:
    # Sessions' statements are counted as they run; the turn store counts its own
    # (storage/timing.py).
    DB_STATEMENTS.inc()
