"""A PostgreSQL connection that failed at the connection level is discarded, never handed
out again (storage/engine.py for SQLAlchemy's pool, the turn store's own asyncpg pool), and
the failure reaches callers as ``DatabaseUnavailable`` (a 503), once, with its cause."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import asyncpg
import pytest
from sqlalchemy import text

from agentic_api.storage import engine as engine_module
from agentic_api.storage.database import Database
from agentic_api.storage.errors import DatabaseUnavailable, is_connection_lost
from tests.support.databases import pg_dsn


@pytest.fixture
async def database(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Database]:
    # Never pinged at checkout: what is handed out is what the pool kept.
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_SECONDS", 3600.0)
    db = Database.from_url(pg_url, pool_size=1)
    yield db
    await db.close()


async def end_the_sleeping_backend(url: str, statement: Awaitable[object]) -> BaseException:
    """Runs ``statement`` (a ``pg_sleep``) and ends its backend while it sleeps; returns
    what the statement raised."""
    running = asyncio.ensure_future(statement)
    admin = await asyncpg.connect(pg_dsn(url))
    try:
        for _ in range(1000):
            ended = await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event = 'PgSleep'"
            )
            if ended:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the statement never started sleeping")
    finally:
        await admin.close()
    with pytest.raises(Exception) as raised:
        await running
    return raised.value


async def sleep_in_session(db: Database) -> None:
    async with db.read() as session:
        await session.execute(text("SELECT pg_sleep(30)"))


async def backend_pid(db: Database) -> int:
    async with db.read() as session:
        return int((await session.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_session_whose_backend_ended_is_503_and_its_connection_is_not_reused(
    database: Database, pg_url: str
) -> None:
    before = await backend_pid(database)
    failure = await end_the_sleeping_backend(pg_url, sleep_in_session(database))
    assert isinstance(failure, DatabaseUnavailable)
    assert failure.status_code == 503 and failure.code == "database_unavailable"
    # The pool's one connection was the one that failed: the next session gets a new
    # backend at once, without an error of its own.
    assert await backend_pid(database) != before


async def test_the_turn_stores_read_whose_backend_ended_is_503_and_then_reads_again(
    database: Database, pg_url: str
) -> None:
    store = database.turns
    assert await store.checkpoint("ten_none", "resp_none") is None
    admin = await asyncpg.connect(pg_dsn(pg_url))
    try:
        # The store's read waits for this lock: then its backend is ended.
        async with admin.transaction():
            await admin.execute("LOCK TABLE responses IN ACCESS EXCLUSIVE MODE")
            reading = asyncio.ensure_future(store.checkpoint("ten_none", "resp_none"))
            for _ in range(1000):
                ended = await admin.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
                if ended:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the read never waited for the lock")
            with pytest.raises(DatabaseUnavailable):
                await reading
    finally:
        await admin.close()
    assert await store.checkpoint("ten_none", "resp_none") is None


def test_what_counts_as_a_lost_connection() -> None:
    assert is_connection_lost(ConnectionRefusedError())
    assert is_connection_lost(asyncpg.exceptions.AdminShutdownError("terminating"))
    assert is_connection_lost(asyncpg.exceptions.InternalClientError("cannot switch to state 12"))
    assert is_connection_lost(asyncpg.exceptions.ConnectionDoesNotExistError("closed"))
    assert not is_connection_lost(asyncpg.exceptions.UniqueViolationError("duplicate"))
    assert not is_connection_lost(asyncpg.exceptions.SerializationError("retry"))
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = asyncpg.exceptions.AdminShutdownError("terminating")
    assert is_connection_lost(wrapped)
