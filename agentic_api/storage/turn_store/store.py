"""The two storage operations every turn makes: read the checkpoint it continues, and
store it. Everything else a turn may touch (a conversation, a background job, an
Idempotency-Key, a chain's items on a cache miss) goes through the repositories.

Implementations with one behaviour: ``SessionTurnStore`` through SQLAlchemy sessions (the
reference, and what any other database gets), and for SQLite and PostgreSQL stores that
run the same statements (``storage/turn_store/statements.py``: compiled from the same tables, values
converted by the same column types) on the driver's connection: on a turn's few small
statements SQLAlchemy's execution layer cost far more than the database (reading a
checkpoint on SQLite: 0.31 ms through a session, 0.011 ms of SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.token_artifacts import TokenArtifactRepository
from agentic_api.storage.turn_rows import EventJson, NewItem


class TurnStore(Protocol):
    async def checkpoint(self, tenant_id: str, response_id: str) -> Response | None:
        """A live response of this tenant, without its stored object and request (what a
        continuation needs of its parent)."""

    async def insert(
        self,
        row: Response,
        items: Sequence[NewItem],
        events: Sequence[EventJson],
        artifact: TokenArtifactRow | None = None,
    ) -> None:
        """Stores a turn that touches nothing else, in one transaction: its row, its items
        from position 0, its stored events ``(sequence_number, json)`` and its token
        artifact, if any."""

    async def close(self) -> None:
        """Releases what the store holds of its own (the database stays open)."""


class UnitOfWork(Protocol):
    """What the reference store needs of ``storage/database.py``'s ``Database``."""

    def turn_read(self) -> AbstractAsyncContextManager[AsyncSession]: ...

    def write(self) -> AbstractAsyncContextManager[AsyncSession]: ...


class SessionTurnStore:
    def __init__(self, db: UnitOfWork) -> None:
        self._db = db

    async def checkpoint(self, tenant_id: str, response_id: str) -> Response | None:
        async with self._db.turn_read() as session:
            return await ResponseRepository(session).get(tenant_id, response_id, documents=False)

    async def insert(
        self,
        row: Response,
        items: Sequence[NewItem],
        events: Sequence[EventJson],
        artifact: TokenArtifactRow | None = None,
    ) -> None:
        async with self._db.write() as session:
            repo = ResponseRepository(session)
            await repo.insert(row, items)
            await repo.add_events(row.id, events)
            if artifact is not None:
                await TokenArtifactRepository(session).insert(artifact)

    async def close(self) -> None:
        return None


def open_turn_store(engine: AsyncEngine, db: UnitOfWork) -> TurnStore:
    """The store for ``engine``'s database (the turn engine: on SQLite, the inline one)."""
    dialect = engine.dialect.name
    if dialect == "postgresql":
        from agentic_api.storage.turn_store.postgres import PostgresTurnStore

        # As many connections of its own as the engine keeps (its overflow aside).
        pool_size = getattr(engine.pool, "size", lambda: 10)()
        return PostgresTurnStore(engine, pool_size=pool_size)
    if dialect != "sqlite":
        return SessionTurnStore(db)
    from agentic_api.storage.turn_store.sqlite import SqliteTurnStore

    database = engine.url.database
    assert database, "SQLite needs a database file"
    return SqliteTurnStore(database, engine.dialect)
