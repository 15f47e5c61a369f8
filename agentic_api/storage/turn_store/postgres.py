"""A turn's checkpoint read and its insert on PostgreSQL, on asyncpg connections of the
store's own pool.

Not SQLAlchemy's pool: checking a connection out of it and back (the AsyncConnection,
its greenlet, the pool's events and reset) cost about as much CPU as the statement
itself, twice per turn; an asyncpg pool's acquire is a queue operation. Its connections
get the JSON codecs SQLAlchemy installs on its own (json and jsonb through the engine's
serializer), so a row reads the same through either; the statements and value
conversions are ``storage/turn_store/statements.py``'s, compiled for the asyncpg
dialect, so rows are the ones the repositories write and read. asyncpg replaces a
connection the server closed when it is next acquired, and one that failed at the
connection level is terminated before it goes back (never handed out again), and one
going back is not reset (``_nothing_to_reset``: there is nothing to reset, and asyncpg's
reset is a round trip of its own). Each statement runs in autocommit, so one round trip:
the checkpoint a plain SELECT; the insert the row's INSERT with the items and events
inserted from arrays in data-modifying CTEs of the same statement (atomic as any
statement; the items' and events' foreign keys are checked at its end, when the row is
there). As a BEGIN / INSERT / INSERT / COMMIT transaction it had taken four. That
statement's item and event parts are generated from the same column tuples
(``storage/turn_rows.py``), one array per column of their own.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy
from sqlalchemy import FromClause, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from agentic_api.storage.errors import is_connection_lost
from agentic_api.storage.models import Response, ResponseEvent, ResponseItem, TokenArtifactRow
from agentic_api.storage.timing import timed_transaction
from agentic_api.storage.turn_rows import (
    COPIED_FROM_RESPONSE,
    EVENT_COLUMNS,
    ITEM_COLUMNS,
    EventJson,
    NewItem,
)
from agentic_api.storage.turn_store.statements import RowInsert, TurnInsert, TurnStatements


class PostgresTurnStore:
    def __init__(self, engine: AsyncEngine, *, pool_size: int = 10) -> None:
        self._engine = engine
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()
        self._statements = TurnStatements(engine.dialect)
        self._items = _ArrayInsert(ResponseItem.__table__, ITEM_COLUMNS, "item", engine.dialect)
        self._events = _ArrayInsert(ResponseEvent.__table__, EVENT_COLUMNS, "event", engine.dialect)
        # The whole statement, by responses INSERT (parameters number on from its own) and
        # whether a token artifact is stored with it.
        self._one_statements: dict[tuple[str, bool], str] = {}

    async def checkpoint(self, tenant_id: str, response_id: str) -> Response | None:
        read = self._statements.checkpoint(tenant_id, response_id)
        pool = self._pool or await self._open()
        with timed_transaction("read", statements=1):
            async with pool.acquire() as connection, _discarded_if_broken(connection):
                raw = await connection.fetchrow(read.sql, *read.parameters)
        return None if raw is None else self._statements.checkpoint_row(tuple(raw))

    async def insert(
        self,
        row: Response,
        items: Sequence[NewItem],
        events: Sequence[EventJson],
        artifact: TokenArtifactRow | None = None,
    ) -> None:
        turn = self._statements.insert(row, items, events, artifact)
        response = turn.response
        shape = (response.sql, turn.artifact is not None)
        sql = self._one_statements.get(shape)
        if sql is None:
            sql = self._one_statement(turn)
            self._one_statements[shape] = sql
        parameters = [*response.parameters, *self._items.arrays(turn.items)]
        parameters += self._events.arrays(turn.events)
        if turn.artifact is not None:
            parameters += turn.artifact.parameters
        pool = self._pool or await self._open()
        with timed_transaction("write", statements=1):
            async with pool.acquire() as connection, _discarded_if_broken(connection):
                await connection.execute(sql, *parameters)

    def _one_statement(self, turn: TurnInsert) -> str:
        """The response's INSERT as compiled ($1 ... $n), the items' INSERT from arrays, the
        token artifact's INSERT as compiled (its placeholders renumbered to follow the
        arrays'), and the events' INSERT from arrays: data-modifying CTEs of one statement."""
        first_item = len(turn.response.parameters) + 1
        first_event = first_item + len(self._items.own_columns)
        before_artifact = first_event + len(self._events.own_columns) - 1
        copied = ", ".join(dict.fromkeys(COPIED_FROM_RESPONSE.values()))
        parts = [
            f"WITH response AS ({turn.response.sql} RETURNING {copied})",
            f"items AS ({self._items.sql(first_parameter=first_item)})",
        ]
        if turn.artifact is not None:
            parts.append(f"artifact AS ({_renumbered(turn.artifact.sql, by=before_artifact)})")
        return ",\n".join(parts) + "\n" + self._events.sql(first_parameter=first_event)

    async def _open(self) -> asyncpg.Pool:
        async with self._opening:
            if self._pool is None:
                _args, options = self._engine.dialect.create_connect_args(self._engine.url)
                # SQLAlchemy's own emulation options, not asyncpg's.
                for own in ("prepared_statement_cache_size", "prepared_statement_name_func"):
                    options.pop(own, None)
                self._pool = await asyncpg.create_pool(
                    min_size=1,
                    max_size=self._pool_size,
                    init=_json_codecs,
                    reset=_nothing_to_reset,
                    **options,
                )
            return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


@asynccontextmanager
async def _discarded_if_broken(connection: PoolConnectionProxy[Any]) -> AsyncIterator[None]:
    """A connection whose statement failed at the connection level (the server ended its
    session, the socket broke, the protocol was left mid-operation) is terminated before
    the pool takes it back, so the pool opens a new one instead of handing it out again;
    one that failed a statement cleanly (a constraint, a lock timeout) is as good as new."""
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError) or is_connection_lost(exc):
            # Cancelled mid-statement, the protocol may still wait for the server's answer.
            # (Already taken back when the pool was closed meanwhile: it closed it too.)
            with suppress(asyncpg.InterfaceError):
                connection.terminate()
        raise


class _ArrayInsert:
    """An INSERT of many rows of ``table`` that takes each of their own columns as one
    array parameter (the columns copied from the response come from the ``response`` CTE)."""

    def __init__(
        self, table: FromClause, columns: Sequence[str], alias: str, dialect: Dialect
    ) -> None:
        assert isinstance(table, Table)
        self._table = table
        self._columns = tuple(columns)
        self._alias = alias
        self._quote = dialect.identifier_preparer.quote
        self.own_columns = tuple(c for c in self._columns if c not in COPIED_FROM_RESPONSE)
        # Worked out here, so a column without an array type fails at startup.
        self._array_types = tuple(_array_type(table, column) for column in self.own_columns)

    def sql(self, *, first_parameter: int) -> str:
        quote, alias = self._quote, self._alias
        selected = ", ".join(
            f"response.{quote(COPIED_FROM_RESPONSE[c])}"
            if c in COPIED_FROM_RESPONSE
            else f"{alias}.{quote(c)}"
            for c in self._columns
        )
        arrays = ", ".join(
            f"${first_parameter + index}::{array_type}"
            for index, array_type in enumerate(self._array_types)
        )
        return (
            f"INSERT INTO {quote(self._table.name)} ({', '.join(map(quote, self._columns))}) "
            f"SELECT {selected} FROM response, unnest({arrays}) "
            f"AS {alias}({', '.join(map(quote, self.own_columns))})"
        )

    def arrays(self, rows: RowInsert) -> list[list[Any]]:
        """The statement's array parameters for these rows (empty arrays for none)."""
        return [rows.column(column) for column in self.own_columns]


def _array_type(table: Table, column: str) -> str:
    # text, not varchar(n): a cast to varchar(n) would truncate a value silently, where
    # the insert into the column refuses one that is too long.
    python_type = table.c[column].type.python_type
    if python_type is int:
        return "integer[]"
    if python_type is str:
        return "text[]"
    raise TypeError(f"no array type for {table.name}.{column} ({python_type.__name__})")


_PLACEHOLDER = re.compile(r"\$(\d+)")


def _renumbered(sql: str, *, by: int) -> str:
    """A compiled statement's positional placeholders ($1 ...) moved on by ``by``, for
    placing it after others in one statement (compiled SQL has no other ``$`` tokens)."""
    return _PLACEHOLDER.sub(lambda found: f"${int(found.group(1)) + by}", sql)


async def _nothing_to_reset(_connection: asyncpg.Connection) -> None:
    """What a connection of this store needs reset before it goes back to the pool:
    nothing. Its statements run in autocommit and leave no session state (no SET, LISTEN,
    advisory lock, cursor or open transaction; asyncpg itself still rolls back a
    transaction left open, without a round trip when there is none). asyncpg's default
    reset sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` on
    every release: a second round trip for each statement (measured: 7.5% of the
    server's CPU in ``bench overhead`` at c=16 on PostgreSQL, and a wait on a busy server)."""


async def _json_codecs(connection: asyncpg.Connection) -> None:
    """json and jsonb as SQLAlchemy's asyncpg dialect sets them up on its connections:
    written as the JSON text the statements bind, read through orjson."""
    await connection.set_type_codec(
        "json", encoder=str.encode, decoder=orjson.loads, schema="pg_catalog", format="binary"
    )
    await connection.set_type_codec(
        "jsonb",
        # PostgreSQL's binary jsonb is a version byte (1) before the text.
        encoder=lambda text: b"\x01" + text.encode(),
        decoder=lambda data: orjson.loads(data[1:]),
        schema="pg_catalog",
        format="binary",
    )
