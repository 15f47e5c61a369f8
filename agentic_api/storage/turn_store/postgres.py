"""A turn's checkpoint read and its insert on PostgreSQL, on the asyncpg connection itself.

Connections still come from the engine's pool (pre-pinged, recycled, with the JSON codecs
SQLAlchemy installs on them); the statements and value conversions are
``storage/turn_store/statements.py``'s, compiled for the asyncpg dialect, so rows are the ones the
repositories write and read. Each is one statement in autocommit, so one round trip:
the checkpoint a plain SELECT; the insert the row's INSERT with the items and events
inserted from arrays in data-modifying CTEs of the same statement (atomic as any
statement; the items' and events' foreign keys are checked at its end, when the row is
there). As a BEGIN / INSERT / INSERT / COMMIT transaction it had taken four.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentic_api.metrics import DB_STATEMENTS, DB_TRANSACTION_DURATION
from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.responses import NewItem
from agentic_api.storage.turn_store.statements import EVENT_KEYS, ITEM_KEYS, TurnStatements


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
        self,
        row: Response,
        items: Sequence[NewItem],
        events: Sequence[tuple[int, str]],
        artifact: TokenArtifactRow | None = None,
    ) -> None:
        row_insert, *rows = self._statements.insert(row, items, events)
        item_rows: list[tuple[Any, ...]] = next(
            (b.parameters for b in rows if b.sql.startswith(_ITEMS)), []
        )
        event_rows: list[tuple[Any, ...]] = next(
            (b.parameters for b in rows if b.sql.startswith(_EVENTS)), []
        )
        first = len(row_insert.parameters)
        extra = ""
        artifact_parameters: tuple[Any, ...] = ()
        if artifact is not None:
            # The artifact's own compiled INSERT, its placeholders moved past the others'.
            artifact_insert = self._statements.artifact_insert(artifact)
            extra = _ARTIFACT.format(sql=_shift_placeholders(artifact_insert.sql, first + 7))
            artifact_parameters = artifact_insert.parameters
        sql = _ONE_STATEMENT.format(
            row_insert=row_insert.sql,
            artifact=extra,
            **{f"p{i}": f"${first + i}" for i in range(1, 8)},
        )
        item_columns = _columns(item_rows, len(ITEM_KEYS))
        event_columns = _columns(event_rows, len(EVENT_KEYS))
        parameters = [
            *row_insert.parameters,
            # positions, item ids, roles, types, data (the response and tenant come from
            # the row); then sequence numbers and data.
            *item_columns[1:2],
            *item_columns[3:],
            *event_columns[1:],
            *artifact_parameters,
        ]
        started = time.perf_counter()
        try:
            async with self._engine.connect() as connection:
                driver = await _driver(connection)
                await driver.execute(sql, *parameters)
        finally:
            DB_STATEMENTS.inc()
            DB_TRANSACTION_DURATION.labels("write").observe(time.perf_counter() - started)

    def close(self) -> None:
        return None


_ITEMS = "INSERT INTO response_items"
_EVENTS = "INSERT INTO response_events"
# The row's insert as compiled ($1 ... $n), then the items and events as arrays.
_ONE_STATEMENT = """WITH response AS ({row_insert} RETURNING id, tenant_id),
items AS (
  INSERT INTO response_items (response_id, position, tenant_id, item_id, role, type, data)
  SELECT response.id, item.position, response.tenant_id, item.item_id, item.role, item.type,
         item.data
  FROM response,
       unnest({p1}::integer[], {p2}::text[], {p3}::text[], {p4}::text[], {p5}::text[])
         AS item(position, item_id, role, type, data)
){artifact}
INSERT INTO response_events (response_id, sequence_number, data)
SELECT response.id, event.sequence_number, event.data
FROM response, unnest({p6}::integer[], {p7}::text[]) AS event(sequence_number, data)"""


_ARTIFACT = """,
artifact AS ({sql})"""
_PLACEHOLDER = re.compile(r"\$(\d+)")


def _shift_placeholders(sql: str, by: int) -> str:
    return _PLACEHOLDER.sub(lambda found: f"${int(found.group(1)) + by}", sql)


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows of parameters as one list per column."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


async def _driver(connection: AsyncConnection) -> Any:
    """The asyncpg connection under a pooled SQLAlchemy one."""
    raw = await connection.get_raw_connection()
    return raw.driver_connection
