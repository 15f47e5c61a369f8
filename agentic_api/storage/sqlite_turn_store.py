"""A turn's checkpoint read and its insert on SQLite, on a plain sqlite3 connection.

The statements and value conversions are ``storage/compiled.py``'s, compiled for the
inline engine's dialect, so a row written here is the row ``ResponseRepository.insert``
would write, and the other way round.

The connection is this process's own, used on the event loop's thread like the inline
driver's (``storage/sqlite_driver.py``): a unit of work runs without awaiting anything
between its BEGIN and its COMMIT, so units never interleave on it; a write lock held
elsewhere is waited for with ``asyncio.sleep`` (never blocking the loop); WAL
checkpoints run on a worker thread.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy.engine import Dialect

from agentic_api.metrics import DB_STATEMENTS, DB_TRANSACTION_DURATION
from agentic_api.storage.compiled import Batch, TurnStatements
from agentic_api.storage.database import DatabaseBusy
from agentic_api.storage.models import Response
from agentic_api.storage.responses import NewItem
from agentic_api.storage.sqlite_driver import WalCheckpoints, is_busy, run_when_unlocked

T = TypeVar("T")


class SqliteTurnStore:
    def __init__(self, database: str, dialect: Dialect) -> None:
        self._database = database
        self._statements = TurnStatements(dialect)
        self._connection: sqlite3.Connection | None = None
        self._checkpoints = WalCheckpoints()
        self._checkpoints.database = database

    async def checkpoint(self, tenant_id: str, response_id: str) -> Response | None:
        read = self._statements.checkpoint(tenant_id, response_id)
        cursor = self._open().cursor()
        started = time.perf_counter()
        try:
            # One statement: its own transaction, no BEGIN needed.
            raw = await self._unlocked(lambda: cursor.execute(read.sql, read.parameters).fetchone())
        finally:
            DB_STATEMENTS.inc()
            DB_TRANSACTION_DURATION.labels("read").observe(time.perf_counter() - started)
        return None if raw is None else self._statements.checkpoint_row(raw)

    async def insert(
        self, row: Response, items: Sequence[NewItem], events: Sequence[tuple[int, str]]
    ) -> None:
        await self._write(self._statements.insert(row, items, events))

    async def _write(self, batches: Sequence[Batch]) -> None:
        connection = self._open()
        cursor = connection.cursor()
        started = time.perf_counter()
        try:
            await self._unlocked(lambda: cursor.execute("BEGIN IMMEDIATE"))
            # From here to COMMIT nothing is awaited: no other turn can use the connection.
            try:
                for batch in batches:
                    if batch.many:
                        cursor.executemany(batch.sql, batch.parameters)
                    else:
                        cursor.execute(batch.sql, batch.parameters)
                cursor.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.rollback()
                raise
        finally:
            DB_STATEMENTS.inc(1 + len(batches))
            DB_TRANSACTION_DURATION.labels("write").observe(time.perf_counter() - started)
        self._checkpoints.note_commit()

    async def _unlocked(self, attempt: Callable[[], T]) -> T:
        try:
            return await run_when_unlocked(attempt)
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                raise DatabaseBusy("the database is busy; retry the request") from exc
            raise

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
