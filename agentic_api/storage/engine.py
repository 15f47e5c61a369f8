"""Engine creation and the dialect differences we paper over (SQLite pragmas, BEGIN modes)."""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from agentic_api.storage.sqlite.drivers import INLINE_DRIVER, ONE_HOP_DRIVER
from agentic_api.storage.sqlite.pragmas import SQLITE_BUSY_TIMEOUT_MS, connection_pragmas


def _dump_json(value: Any) -> str:
    return orjson.dumps(value).decode()


# JSON columns go through orjson: several times faster than the stdlib on every turn's
# response body, and it refuses NaN rather than writing invalid JSON.
_JSON_CODEC: dict[str, Any] = {"json_serializer": _dump_json, "json_deserializer": orjson.loads}


def create_engine(
    url: str, *, pool_size: int = 10, echo: bool = False, inline: bool = False
) -> AsyncEngine:
    """``inline``: SQLite only, the driver that runs statements on the event loop's
    thread (``storage/sqlite/drivers.py``), for a turn's short critical-path work."""
    if url.startswith("sqlite"):
        return _sqlite_engine(url, echo=echo, inline=inline)
    return create_async_engine(
        url,
        echo=echo,
        **_JSON_CODEC,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
    )


def _sqlite_engine(url: str, *, echo: bool, inline: bool) -> AsyncEngine:
    kwargs: dict[str, Any] = {"echo": echo, **_JSON_CODEC}
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
