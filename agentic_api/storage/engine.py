"""Engine creation and the dialect differences we paper over (SQLite pragmas, BEGIN modes)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, ExceptionContext
from sqlalchemy.exc import InvalidatePoolError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from agentic_api.storage.errors import is_connection_lost
from agentic_api.storage.sqlite.drivers import INLINE_DRIVER, ONE_HOP_DRIVER
from agentic_api.storage.sqlite.pragmas import SQLITE_BUSY_TIMEOUT_MS, connection_pragmas
from agentic_api.storage.types import JSON_CODEC


def create_engine(
    url: str, *, pool_size: int = 10, echo: bool = False, inline: bool = False
) -> AsyncEngine:
    """``inline``: SQLite only, the driver that runs statements on the event loop's
    thread (``storage/sqlite/drivers.py``), for a turn's short critical-path work."""
    if url.startswith("sqlite"):
        return _sqlite_engine(url, echo=echo, inline=inline)
    engine = create_async_engine(
        url,
        echo=echo,
        **JSON_CODEC,
        pool_size=pool_size,
        max_overflow=pool_size,
        # Not SQLAlchemy's pre-ping: it pings at every checkout, and for asyncpg a ping is a
        # transaction (BEGIN, ";", ROLLBACK: three round trips). A turn checks out twice
        # (its parent's read, its commit), so that was six round trips per turn, and under
        # concurrency the added latency fell by half without them (docs/benchmarks).
        pool_pre_ping=False,
        pool_recycle=1800,
    )
    _ping_after_idle(engine)
    _discard_broken_connections(engine)
    return engine


def _discard_broken_connections(engine: AsyncEngine) -> None:
    """A connection whose statement failed at the connection level is invalidated (closed,
    never pooled again), as the pool does for what the dialect recognizes as a
    disconnect. The asyncpg dialect recognizes one only once the driver has marked the
    connection closed; a backend terminated mid-statement (``pg_terminate_backend``, a
    restart) is often reported before that, and such a connection went back to the pool
    to fail the next request with "cannot switch to state 12; another operation is in
    progress". With a disconnect, SQLAlchemy also recycles the connections pooled before
    it, at their next checkout: a restarted server has closed them all."""

    @event.listens_for(engine.sync_engine, "handle_error")
    def _connection_level(context: ExceptionContext) -> None:
        if not context.is_disconnect and is_connection_lost(context.original_exception):
            context.is_disconnect = True


# A pooled connection unused for this long is pinged before it is handed out; one in
# steady use is not (it proved itself alive a moment ago).
PING_AFTER_IDLE_SECONDS = 1.0


def _ping_after_idle(engine: AsyncEngine) -> None:
    """Pessimistic disconnect handling for connections that sat idle: a server restarted
    (or a connection dropped by a proxy) meanwhile is found at checkout, where the pool
    replaces it — and, as with SQLAlchemy's own pre-ping, every connection pooled before
    it — rather than by the statement that needed it."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            dbapi_connection.ping()
        except Exception as exc:
            raise InvalidatePoolError() from exc


def _sqlite_engine(url: str, *, echo: bool, inline: bool) -> AsyncEngine:
    kwargs: dict[str, Any] = {"echo": echo, **JSON_CODEC}
    if ":memory:" in url or url.rstrip("/").endswith("sqlite+aiosqlite:"):
        # A private in-memory database would vanish between pooled connections.
        raise ValueError("in-memory SQLite is not supported; give the database a file")
    driver = INLINE_DRIVER if inline else ONE_HOP_DRIVER
    engine = create_async_engine(url.replace("sqlite+aiosqlite:", f"sqlite+{driver}:", 1), **kwargs)
    # The inline driver never waits inside SQLite (it retries after an asyncio.sleep), and
    # only reads: a write may fsync, which must never happen on the event loop's thread.
    busy_timeout_ms = 0 if inline else SQLITE_BUSY_TIMEOUT_MS

    @event.listens_for(engine.sync_engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control from pysqlite so we can say BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in connection_pragmas(busy_timeout_ms=busy_timeout_ms, read_only=inline):
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Connection) -> None:
        # Writers take the write lock up front: a deferred transaction that reads first
        # and writes later fails at once with SQLITE_BUSY instead of waiting its turn.
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def uses_null_pool(engine: AsyncEngine) -> bool:
    return isinstance(engine.pool, NullPool)
