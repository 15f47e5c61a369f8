"""Two SQLAlchemy async SQLite drivers that spend less per statement than the stock one.

The stock aiosqlite adapter makes several calls per statement (open a cursor, execute,
fetch, close), each a round trip between the event loop and aiosqlite's thread: a queue
put and a cross-thread wakeup. On a turn's few small statements those round trips were
most of its database time (a depth-40 checkpoint read took ~1.7 ms per statement,
against 0.02-0.3 ms of SQL), and more on a busy machine, where the thread must be
scheduled before the loop can go on.

- ``sqlite+agentic_aiosqlite`` (**one hop**): aiosqlite's thread, one round trip per
  statement (execute, fetch every row, close, hand back rows, description and counts),
  and a transaction's ``BEGIN`` travels with its first statement. Used for everything
  that may run long (listings, purges, aggregates), so the event loop never waits on it.
- ``sqlite+agentic_inline`` (**inline**): the statement runs on the event loop's own
  thread. Only for the short, bounded reads on a turn's critical path. It must never
  block the loop, so its connections are read only (``PRAGMA query_only``: a write can
  wait for another process's write lock, fsync the WAL header when the log restarts,
  or fold the WAL back into the file; on a slow disk any of these would stall every request in
  flight) and have no busy timeout: a ``SQLITE_BUSY`` (rare for a reader in WAL mode)
  is retried after an ``asyncio.sleep``, with backoff, up to the same overall wait as
  the other driver's busy timeout.

``storage/engine.py`` builds the engines; ``storage/database.py`` decides which work uses
which. Server-side cursors (unused here) keep the stock behaviour.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
    SQLiteDialect_aiosqlite,
)
from sqlalchemy.util import EMPTY_DICT
from sqlalchemy.util.concurrency import await_

from agentic_api.storage.errors import is_busy

ONE_HOP_DRIVER = "agentic_aiosqlite"
INLINE_DRIVER = "agentic_inline"
# The inline driver's overall wait for a lock held elsewhere (as busy_timeout would).
BUSY_WAIT_SECONDS = 10.0
_FIRST_BACKOFF_SECONDS = 0.0005
_MAX_BACKOFF_SECONDS = 0.02

_Outcome = tuple[Any, int, int | None, list[Any]]
T = TypeVar("T")


def _run_statement(
    connection: sqlite3.Connection, begin: str | None, operation: str, parameters: Any, many: bool
) -> _Outcome:
    """The transaction's deferred BEGIN if any, then the statement and everything read
    back from it (on whichever thread owns ``connection``)."""
    cursor = connection.cursor()
    try:
        if begin is not None:
            cursor.execute(begin)
        if many:
            cursor.executemany(operation, parameters)
        else:
            cursor.execute(operation, () if parameters is None else parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
    """A buffered cursor that holds the results of its last statement, not a live one."""

    __slots__ = ("_description", "_lastrowid", "_rowcount")

    def __init__(self, adapt_connection: AsyncAdapt_aiosqlite_connection) -> None:
        # Unlike the base class, no driver cursor is opened (that is a round trip).
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = collections.deque()
        self._description: Any = None
        self._rowcount = -1
        self._lastrowid: int | None = None

    @property
    def description(self) -> Any:
        return self._description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> int:
        return self._lastrowid  # type: ignore[return-value]

    async def _async_soft_close(self) -> None:
        return None

    def close(self) -> None:
        self._rows.clear()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        try:
            return await_(self._run(operation, parameters, many=False))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        try:
            return await_(self._run(operation, seq_of_parameters, many=True))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    async def _run(self, operation: Any, parameters: Any, *, many: bool) -> None:
        connection = self._adapt_connection
        assert isinstance(connection, OneHopConnection)
        if not many and _is_begin(operation):
            # Sent with the transaction's first statement (an empty transaction then
            # costs nothing). A BEGIN IMMEDIATE still takes the write lock before that
            # statement runs.
            connection.pending_begin = operation
            self._description, self._rowcount, self._lastrowid = None, -1, None
            self._rows = collections.deque()
            return
        begin, connection.pending_begin = connection.pending_begin, None
        async with connection._execute_mutex:
            outcome = await connection.run_statement(begin, operation, parameters, many)
        self._description, self._rowcount, self._lastrowid, rows = outcome
        self._rows = collections.deque(rows)


def _is_begin(operation: Any) -> bool:
    return isinstance(operation, str) and operation[:5].upper() == "BEGIN"


class OneHopConnection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ("pending_begin",)
    _cursor_cls = OneHopCursor  # type: ignore[assignment]

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        self.pending_begin: str | None = None

    async def run_statement(
        self, begin: str | None, operation: str, parameters: Any, many: bool
    ) -> _Outcome:
        driver = self._connection
        outcome: _Outcome = await driver._execute(
            _run_statement, driver._conn, begin, operation, parameters, many
        )
        return outcome

    def _idle(self) -> bool:
        """Whether there is no transaction to end: none was begun, or its BEGIN still
        waits for a first statement (and is simply dropped). ``in_transaction`` only
        reads SQLite's autocommit flag, which is safe from any thread."""
        begun, self.pending_begin = self.pending_begin, None
        return begun is not None or not self._connection._conn.in_transaction

    def commit(self) -> None:
        if self._connection._connection and not self._idle():
            super().commit()

    def rollback(self) -> None:
        # The pool also rolls back every connection it takes back, mostly after the
        # transaction already ended: no round trip for those.
        if self._connection._connection and not self._idle():
            super().rollback()


class OneHopDbapi(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> OneHopConnection:
        stock = super().connect(*arg, **kw)
        return OneHopConnection(self, stock._connection)


class OneHopSQLiteDialect(SQLiteDialect_aiosqlite):
    driver = ONE_HOP_DRIVER
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> OneHopDbapi:
        return OneHopDbapi(__import__("aiosqlite"), __import__("sqlite3"))


# --- inline -------------------------------------------------------------------------


class LoopThreadSqlite:
    """Plays the part of an aiosqlite connection for SQLAlchemy's adapter, over a plain
    sqlite3 connection used only on the event loop's thread."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._conn = connection
        self._connection: sqlite3.Connection | None = connection

    async def commit(self) -> None:
        self._conn.commit()

    async def rollback(self) -> None:
        self._conn.rollback()

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._connection is not None:
            self._connection = None
            self._conn.close()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)


class InlineConnection(OneHopConnection):
    __slots__ = ()

    @property
    def isolation_level(self) -> str | None:
        level: str | None = self._connection._conn.isolation_level
        return level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self._connection._conn.isolation_level = value

    async def run_statement(
        self, begin: str | None, operation: str, parameters: Any, many: bool
    ) -> _Outcome:
        connection: sqlite3.Connection = self._connection._conn
        if begin is None:
            # Within a transaction: a failure is the transaction's, not to be retried.
            return _run_statement(connection, None, operation, parameters, many)

        def attempt() -> _Outcome:
            try:
                return _run_statement(connection, begin, operation, parameters, many)
            except sqlite3.OperationalError as exc:
                # A transaction's first statement can be tried again once its BEGIN (if
                # that succeeded) is undone: then nothing of it has happened.
                if is_busy(exc) and connection.in_transaction:
                    connection.rollback()
                raise

        return await run_when_unlocked(attempt)


async def run_when_unlocked(attempt: Callable[[], T]) -> T:
    """``attempt()`` (synchronous, on the loop's thread), tried again after an
    ``asyncio.sleep`` with backoff while it fails with SQLITE_BUSY, for up to
    ``BUSY_WAIT_SECONDS``; then its last error is raised. ``attempt`` must leave nothing
    behind when it fails."""
    backoff = _FIRST_BACKOFF_SECONDS
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)


class InlineDbapi(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> InlineConnection:
        database = arg[0] if arg else kw.pop("database")
        kw.pop("async_creator_fn", None)
        # Never block the loop waiting for a lock: InlineConnection retries instead.
        kw["timeout"] = 0
        kw["check_same_thread"] = False
        raw = sqlite3.connect(database, *arg[1:], **kw)
        return InlineConnection(self, LoopThreadSqlite(raw))


class InlineSQLiteDialect(SQLiteDialect_aiosqlite):
    driver = INLINE_DRIVER
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> InlineDbapi:
        return InlineDbapi(__import__("aiosqlite"), __import__("sqlite3"))


registry.register(f"sqlite.{ONE_HOP_DRIVER}", __name__, "OneHopSQLiteDialect")
registry.register(f"sqlite.{INLINE_DRIVER}", __name__, "InlineSQLiteDialect")
