"""A turn's checkpoint read and its insert on PostgreSQL, on the asyncpg connection itself.

Connections still come from the engine's pool (pre-pinged, recycled, with the JSON codecs
SQLAlchemy installs on them); the statements and value conversions are
``storage/compiled.py``'s, compiled for the asyncpg dialect, so rows are the ones the
repositories write and read. The checkpoint is one statement in autocommit (no
BEGIN/ROLLBACK round trips); the insert is one asyncpg transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentic_api.metrics import DB_STATEMENTS, DB_TRANSACTION_DURATION
from agentic_api.storage.compiled import TurnStatements
from agentic_api.storage.models import Response
from agentic_api.storage.responses import NewItem


class PostgresTurnStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._statements = TurnStatements(engine.dialect)

    async def checkpoint(self, tenant_id: str, response_id: str) -> Response | None:
        read = self._statements.checkpoint(tenant_id, response_id)
        started = time.perf_counter()
        try:
            async with self._engine.connect() as connection:
                driver = await _driver(connection)
                raw = await driver.fetchrow(read.sql, *read.parameters)
        finally:
            DB_STATEMENTS.inc()
            DB_TRANSACTION_DURATION.labels("read").observe(time.perf_counter() - started)
        return None if raw is None else self._statements.checkpoint_row(tuple(raw))

    async def insert(
        self, row: Response, items: Sequence[NewItem], events: Sequence[tuple[int, str]]
    ) -> None:
        batches = self._statements.insert(row, items, events)
        started = time.perf_counter()
        try:
            async with self._engine.connect() as connection:
                driver = await _driver(connection)
                async with driver.transaction():
                    for batch in batches:
                        if batch.many:
                            await driver.executemany(batch.sql, batch.parameters)
                        else:
                            await driver.execute(batch.sql, *batch.parameters)
        finally:
            DB_STATEMENTS.inc(len(batches))
            DB_TRANSACTION_DURATION.labels("write").observe(time.perf_counter() - started)

    def close(self) -> None:
        return None


async def _driver(connection: AsyncConnection) -> Any:
    """The asyncpg connection under a pooled SQLAlchemy one."""
    raw = await connection.get_raw_connection()
    return raw.driver_connection
