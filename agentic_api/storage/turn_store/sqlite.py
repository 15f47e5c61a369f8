"""A turn's checkpoint read and its insert on SQLite, on plain sqlite3 connections.

The statements and value conversions are ``storage/turn_store/statements.py``'s, compiled for the
engine's dialect, so a row written here is the row ``ResponseRepository.insert`` would
write, and the other way round.

- The checkpoint read runs on the event loop's thread, on a read-only connection
  (``PRAGMA query_only``), like the inline driver's (``storage/sqlite/drivers.py``): one
  statement, its own transaction; a rare ``SQLITE_BUSY`` is retried after an
  ``asyncio.sleep``, never by blocking.
- The insert runs in one ``BEGIN IMMEDIATE`` transaction, on one of two connections of
  its own. Most run on the event loop's thread, like the read (a write lock held by
  another connection is waited for by ``asyncio.sleep`` and retried, never by
  blocking): on the store's writer thread each statement waited for the GIL held by a
  busy loop, and with 48 streams ending together an insert took 40 ms p50 / 105 ms p95
  to come back for well under a millisecond of SQLite (docs/benchmarks/streaming at
  commit 6a12cfe). The
  commit that may restart the WAL runs on the writer thread instead: the first after the
  store opened and the first after each fold of the WAL, because restarting the log syncs
  its header (one fsync), which on a slow disk would stall every request in flight if it
  ran on the loop. (A fold by another connection, which its own commits make only at
  SQLite's 1000-page threshold, can still leave that sync to a commit on the loop.)
  Turns of one process commit one after another either way: SQLite has one writer at a
  time.
- Folding the WAL back into the database file (what SQLite calls a WAL checkpoint:
  copying the log's pages into the file, then syncing it; "checkpoint" in this project
  otherwise means a stored turn a continuation reads) runs on a third thread, every
  ``FOLD_WAL_EVERY_COMMITS`` commits, in PASSIVE mode: folding a 1000-page log took tens
  of ms, which, left to SQLite's automatic fold inside a commit, made that turn and those
  queued behind it wait.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.engine import Dialect

from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.sqlite.drivers import run_when_unlocked
from agentic_api.storage.sqlite.pragmas import SQLITE_BUSY_TIMEOUT_MS, connection_pragmas
from agentic_api.storage.timing import timed_transaction
from agentic_api.storage.turn_rows import EventJson, NewItem
from agentic_api.storage.turn_store.statements import TurnInsert, TurnStatements

FOLD_WAL_EVERY_COMMITS = 100


class SqliteTurnStore:
    def __init__(self, database: str, dialect: Dialect) -> None:
        self._database = database
        self._statements = TurnStatements(dialect)
        self._reader: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None
        # Whether the next commit may restart the WAL (and sync its header): true until
        # the first commit and after each fold.
        self._wal_may_restart = True
        # Its connection is made, used and closed on the executor's one thread.
        self._writer_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-turn-writer")
        self._writer: sqlite3.Connection | None = None
        self._closed = False
        self._fold_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-wal-fold")
        self._commits = 0
        self._folding = False

    async def checkpoint(self, tenant_id: str, response_id: str) -> Response | None:
        read = self._statements.checkpoint(tenant_id, response_id)
        cursor = self._read_connection().cursor()
        with timed_transaction("read", statements=1):
            raw = await run_when_unlocked(
                lambda: cursor.execute(read.sql, read.parameters).fetchone()
            )
        return None if raw is None else self._statements.checkpoint_row(raw)

    async def insert(
        self,
        row: Response,
        items: Sequence[NewItem],
        events: Sequence[EventJson],
        artifact: TokenArtifactRow | None = None,
    ) -> None:
        turn = self._statements.insert(row, items, events, artifact)
        # BEGIN counts as one, as it does through SQLAlchemy; COMMIT, as there, does not.
        with timed_transaction("write", statements=1 + turn.statement_count):
            if self._wal_may_restart:
                await asyncio.get_running_loop().run_in_executor(
                    self._writer_thread, self._write, turn
                )
                self._wal_may_restart = False
            else:
                await run_when_unlocked(lambda: _write_on(self._inline_connection(), turn))
        self._after_commit()

    def _after_commit(self) -> None:
        self._commits += 1
        if self._commits < FOLD_WAL_EVERY_COMMITS or self._folding or self._closed:
            return
        self._commits = 0
        self._folding = True
        done = self._fold_thread.submit(_fold_wal, self._database)
        done.add_done_callback(self._fold_done)

    def _fold_done(self, _done: object) -> None:
        # (On the fold thread.) The next commit may restart the log: the writer thread's.
        self._wal_may_restart = True
        self._folding = False

    def _write(self, turn: TurnInsert) -> None:
        """On the writer thread."""
        if self._writer is None:
            self._writer = _connect(
                self._database, busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS, folds_wal=False
            )
        _write_on(self._writer, turn)

    def _inline_connection(self) -> sqlite3.Connection:
        """The loop thread's write connection: it never waits for a lock (busy timeout 0:
        ``run_when_unlocked`` waits instead) and never folds the WAL."""
        if self._inline is None:
            self._inline = _connect(self._database, busy_timeout_ms=0, folds_wal=False)
        return self._inline

    def _read_connection(self) -> sqlite3.Connection:
        if self._reader is None:
            self._reader = _connect(self._database, busy_timeout_ms=0, read_only=True)
        return self._reader

    async def close(self) -> None:
        for connection in (self._reader, self._inline):
            if connection is not None:
                connection.close()
        self._reader = self._inline = None
        if not self._closed:
            self._closed = True
            self._writer_thread.submit(self._close_writer).result()
            self._writer_thread.shutdown()
            self._fold_thread.shutdown()

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _write_on(connection: sqlite3.Connection, turn: TurnInsert) -> None:
    """One transaction, committed or rolled back (so it leaves nothing when it fails)."""
    cursor = connection.cursor()
    cursor.execute("BEGIN IMMEDIATE")
    try:
        cursor.execute(turn.response.sql, turn.response.parameters)
        for rows in (turn.items, turn.events):
            if rows.rows:
                cursor.executemany(rows.sql, rows.rows)
        if turn.artifact is not None:
            cursor.execute(turn.artifact.sql, turn.artifact.parameters)
        cursor.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.rollback()
        raise


def _fold_wal(database: str) -> None:
    """On the fold thread: copies what it can of the WAL into the database without
    waiting for readers or writers (PASSIVE); a busy database is left to the next one."""
    connection = _connect(database, busy_timeout_ms=0, folds_wal=False)
    try:
        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except sqlite3.OperationalError:
        pass
    finally:
        connection.close()


def _connect(
    database: str, *, busy_timeout_ms: int, read_only: bool = False, folds_wal: bool = True
) -> sqlite3.Connection:
    """``folds_wal=False``: this connection's commits never fold the WAL into the file."""
    # Autocommit mode: transactions are begun and ended by the statements above.
    connection = sqlite3.connect(
        database,
        isolation_level=None,
        timeout=busy_timeout_ms / 1000,
        check_same_thread=False,
    )
    pragmas = connection_pragmas(
        busy_timeout_ms=busy_timeout_ms, read_only=read_only, folds_wal=folds_wal
    )
    for pragma in pragmas:
        connection.execute(pragma)
    return connection
