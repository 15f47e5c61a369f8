"""The storage seam's shared pieces: a lock held too long is a 503 on every path to the
database (storage/timing.py), and a turn's rows are defined once (storage/turn_rows.py)."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from agentic_api.storage.database import Database
from agentic_api.storage.errors import DatabaseBusy, is_busy
from agentic_api.storage.tenants import TenantRepository
from agentic_api.storage.turn_rows import (
    EVENT_COLUMNS,
    ITEM_COLUMNS,
    NewItem,
    event_values,
    item_values,
)
from tests.storage.test_turn_store import sample_row
from tests.support.databases import pg_dsn, run_on_pg
from tests.support.sqlite import WriteLockHolder, database_file


def test_the_row_builders_set_every_column_of_their_table() -> None:
    items = item_values("resp_a", "ten_a", 3, [NewItem("msg_1", "input", "message", "{}")])
    events = event_values("resp_a", [(0, "{}")])
    assert [tuple(row) for row in items] == [ITEM_COLUMNS]
    assert [tuple(row) for row in events] == [EVENT_COLUMNS]
    assert items[0]["position"] == 3


def test_busy_is_recognized_through_every_wrapping() -> None:
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = sqlite3.SQLITE_BUSY
    assert is_busy(locked)
    assert is_busy(OperationalError("UPDATE t", {}, locked))
    assert is_busy(asyncpg.exceptions.LockNotAvailableError("canceling statement"))
    assert not is_busy(sqlite3.OperationalError("no such table: t"))
    assert not is_busy(asyncpg.exceptions.UniqueViolationError("duplicate key"))
    assert not is_busy(RuntimeError("lock timeout"))


async def test_a_sqlite_write_locked_out_past_the_busy_timeout_is_busy(
    sqlite_file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentic_api.storage import engine

    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 200)
    database = Database.from_url(sqlite_file_url)
    try:
        with WriteLockHolder(database_file(sqlite_file_url)), pytest.raises(DatabaseBusy):
            async with database.write() as session:
                await session.execute(text("SELECT 1"))
    finally:
        await database.close()


@pytest.fixture
def lock_timeout_pg_url(pg_url: str) -> str:
    """A PostgreSQL database whose connections give up on a lock after 200 ms."""
    name = pg_url.rsplit("/", 1)[1]
    run_on_pg(pg_url, f"ALTER DATABASE \"{name}\" SET lock_timeout = '200ms'")
    return pg_url


async def test_postgresql_lock_timeouts_are_busy_in_sessions_and_the_turn_store(
    lock_timeout_pg_url: str,
) -> None:
    database = Database.from_url(lock_timeout_pg_url)
    # A second connection, to hold locks with.
    holder = await asyncpg.connect(pg_dsn(lock_timeout_pg_url))
    try:
        await _lock_timeouts_are_busy(database, holder)
    finally:
        await holder.close()
        await database.close()


async def _lock_timeouts_are_busy(database: Database, holder: asyncpg.Connection) -> None:
    async with database.write() as session:
        tenant = (await TenantRepository(session).create("t")).id
    # A row lock on the tenant blocks the key-share lock a response's foreign key takes.
    async with holder.transaction():
        await holder.execute("SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE", tenant)
        with pytest.raises(DatabaseBusy):
            async with database.write() as session:
                await session.execute(
                    text("UPDATE tenants SET name = 'u' WHERE id = :id"), {"id": tenant}
                )
        with pytest.raises(DatabaseBusy):
            await database.turns.insert(sample_row("resp_busy", tenant), [], [])
    # Once the lock is gone both go through, and the refused turn left nothing.
    assert await database.turns.checkpoint(tenant, "resp_busy") is None
    await database.turns.insert(sample_row("resp_busy", tenant), [], [])
    assert await database.turns.checkpoint(tenant, "resp_busy") is not None
