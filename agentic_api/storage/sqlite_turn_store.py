"""A turn's checkpoint read and its insert on SQLite, on a plain sqlite3 connection.

The statements are SQLAlchemy Core statements over the same tables, compiled once for
the inline engine's dialect; values go in and out through the columns' own type
processors for that dialect (the same JSON encoder, the same timestamp format), so a row
written here is the row ``ResponseRepository.insert`` would write, and the other way
round. What is left out is SQLAlchemy's per-statement execution machinery.

The connection is this process's own, used on the event loop's thread like the inline
driver's (``storage/sqlite_driver.py``): a unit of work runs without awaiting anything
between its BEGIN and its COMMIT, so units never interleave on it; a write lock held
elsewhere is waited for with ``asyncio.sleep`` (never blocking the loop); WAL
checkpoints run on a worker thread.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import ClauseElement, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from agentic_api.metrics import DB_STATEMENTS, DB_TRANSACTION_DURATION
from agentic_api.storage.database import DatabaseBusy
from agentic_api.storage.models import Response, ResponseEvent, ResponseItem
from agentic_api.storage.responses import _COLUMN_KEYS, _LIVE_CHECKPOINT, NewItem
from agentic_api.storage.sqlite_driver import WalCheckpoints, is_busy, run_when_unlocked

T = TypeVar("T")
_Processor = Callable[[Any], Any] | None


class CompiledStatement:
    """A Core statement as SQL for one dialect, with the bind and result conversions of
    its columns' types."""

    def __init__(self, statement: ClauseElement, dialect: Dialect, **compile_kw: Any) -> None:
        compiled = statement.compile(dialect=dialect, **compile_kw)
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        self._names: list[str] = list(compiled.positiontup or [])
        # Through each type's implementation for this dialect (SQLite's DATETIME, JSON), as
        # SQLAlchemy itself converts values.
        self._binds: list[_Processor] = [
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in self._names
        ]
        columns = getattr(statement, "selected_columns", ())
        self.keys: list[str] = [column.key for column in columns]
        self._results: list[_Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(
            values[name] if bind is None else bind(values[name])
            for name, bind in zip(self._names, self._binds, strict=True)
        )

    def row(self, raw: Sequence[Any]) -> dict[str, Any]:
        return {
            key: value if result is None else result(value)
            for key, value, result in zip(self.keys, raw, self._results, strict=True)
        }


_ITEM_KEYS = ("response_id", "position", "tenant_id", "item_id", "role", "type", "data")
_EVENT_KEYS = ("response_id", "sequence_number", "data")


class SqliteTurnStore:
    def __init__(self, database: str, dialect: Dialect) -> None:
        self._database = database
        self._dialect = dialect
        self._connection: sqlite3.Connection | None = None
        self._checkpoint = CompiledStatement(_LIVE_CHECKPOINT, dialect)
        self._item_insert = CompiledStatement(
            insert(ResponseItem), dialect, column_keys=list(_ITEM_KEYS)
        )
        self._event_insert = CompiledStatement(
            insert(ResponseEvent), dialect, column_keys=list(_EVENT_KEYS)
        )
        # One per set of columns a row has set (the others take their defaults).
        self._row_inserts: dict[frozenset[str], CompiledStatement] = {}
        self._checkpoints = WalCheckpoints()
        self._checkpoints.database = database

    async def checkpoint(self, tenant_id: str, response_id: str) -> Response | None:
        statement = self._checkpoint
        parameters = statement.parameters({"tenant_id": tenant_id, "response_id": response_id})
        cursor = self._cursor()
        started = time.perf_counter()
        try:
            # One statement: its own transaction, no BEGIN needed.
            raw = await self._unlocked(lambda: cursor.execute(statement.sql, parameters).fetchone())
        finally:
            DB_STATEMENTS.inc()
            DB_TRANSACTION_DURATION.labels("read").observe(time.perf_counter() - started)
        return None if raw is None else Response(**statement.row(raw))

    async def insert(
        self, row: Response, items: Sequence[NewItem], events: Sequence[tuple[int, str]]
    ) -> None:
        values = {key: value for key, value in vars(row).items() if key in _COLUMN_KEYS}
        row_insert = self._row_insert(frozenset(values))
        statements: list[tuple[str, Any, bool]] = [
            (row_insert.sql, row_insert.parameters(values), False)
        ]
        if items:
            rows = (
                {
                    "response_id": row.id,
                    "position": position,
                    "tenant_id": row.tenant_id,
                    "item_id": item.item_id,
                    "role": item.role,
                    "type": item.type,
                    "data": item.data,
                }
                for position, item in enumerate(items)
            )
            statements.append(
                (self._item_insert.sql, [self._item_insert.parameters(r) for r in rows], True)
            )
        if events:
            rows = (
                {"response_id": row.id, "sequence_number": number, "data": data}
                for number, data in events
            )
            statements.append(
                (self._event_insert.sql, [self._event_insert.parameters(r) for r in rows], True)
            )
        await self._write(statements)

    async def _write(self, statements: Sequence[tuple[str, Any, bool]]) -> None:
        connection = self._open()
        cursor = connection.cursor()
        started = time.perf_counter()
        try:
            await self._unlocked(lambda: cursor.execute("BEGIN IMMEDIATE"))
            # From here to COMMIT nothing is awaited: no other turn can use the connection.
            try:
                for sql, parameters, many in statements:
                    if many:
                        cursor.executemany(sql, parameters)
                    else:
                        cursor.execute(sql, parameters)
                cursor.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.rollback()
                raise
        finally:
            DB_STATEMENTS.inc(1 + len(statements))
            DB_TRANSACTION_DURATION.labels("write").observe(time.perf_counter() - started)
        self._checkpoints.note_commit()

    async def _unlocked(self, attempt: Callable[[], T]) -> T:
        try:
            return await run_when_unlocked(attempt)
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                raise DatabaseBusy("the database is busy; retry the request") from exc
            raise

    def _row_insert(self, keys: frozenset[str]) -> CompiledStatement:
        statement = self._row_inserts.get(keys)
        if statement is None:
            statement = CompiledStatement(insert(Response), self._dialect, column_keys=sorted(keys))
            self._row_inserts[keys] = statement
        return statement

    def _cursor(self) -> sqlite3.Cursor:
        return self._open().cursor()

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            # Autocommit mode (we say BEGIN ourselves); never wait inside SQLite for a lock.
            connection = sqlite3.connect(
                self._database, isolation_level=None, timeout=0, check_same_thread=False
            )
            for pragma in (
                "PRAGMA journal_mode=WAL",
                "PRAGMA foreign_keys=ON",
                "PRAGMA busy_timeout=0",
                "PRAGMA synchronous=NORMAL",
                "PRAGMA wal_autocheckpoint=0",
            ):
                connection.execute(pragma)
            self._connection = connection
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
