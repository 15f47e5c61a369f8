"""The SQLite drivers of storage/sqlite/drivers.py: what they save, that the inline one only
reads, and that it never blocks the event loop while another connection locks it out."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import CursorResult, text

from agentic_api.storage.database import Database
from agentic_api.storage.errors import DatabaseBusy
from agentic_api.storage.sqlite import drivers as sqlite_driver
from tests.support.sqlite import LoopTicks


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str | None, str]]]:
    """Every (deferred BEGIN, statement) that reaches SQLite through either driver."""
    seen: list[tuple[str | None, str]] = []
    real = sqlite_driver._run_statement

    def spy(connection: sqlite3.Connection, begin: str | None, operation: str, *rest: Any) -> Any:
        seen.append((begin, operation))
        return real(connection, begin, operation, *rest)

    monkeypatch.setattr(sqlite_driver, "_run_statement", spy)
    yield seen


def test_turn_sessions_use_the_inline_driver_and_the_rest_one_hop(
    sqlite_database: Database,
) -> None:
    assert sqlite_database.turn_engine.dialect.driver == sqlite_driver.INLINE_DRIVER
    assert sqlite_database.engine.dialect.driver == sqlite_driver.ONE_HOP_DRIVER


@pytest.mark.parametrize("kind", ["read", "turn_read", "write"])
async def test_begin_travels_with_the_first_statement_and_an_empty_transaction_costs_nothing(
    sqlite_database: Database, statements: list[tuple[str | None, str]], kind: str
) -> None:
    session_of = getattr(sqlite_database, kind)
    async with session_of() as session:
        await session.execute(text("SELECT 0"))  # connects (and configures) first
    statements.clear()
    async with session_of() as session:
        await session.execute(text("SELECT 1"))
        await session.execute(text("SELECT 2"))
    expected_begin = "BEGIN IMMEDIATE" if "write" in kind else "BEGIN DEFERRED"
    assert statements == [(expected_begin, "SELECT 1"), (None, "SELECT 2")]
    statements.clear()
    async with session_of() as session:
        await session.connection()
    assert statements == []


async def test_rows_descriptions_and_counts_come_back(sqlite_database: Database) -> None:
    async with sqlite_database.write() as session:
        await session.execute(text("CREATE TABLE IF NOT EXISTS t (a INTEGER, b TEXT)"))
        inserted = await session.execute(
            text("INSERT INTO t VALUES (:a, :b)"), [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
        )
        assert isinstance(inserted, CursorResult) and inserted.rowcount == 2
    for session_of in (sqlite_database.read, sqlite_database.turn_read):
        async with session_of() as session:
            rows = (await session.execute(text("SELECT a, b FROM t ORDER BY a"))).all()
            assert [tuple(r) for r in rows] == [(1, "x"), (2, "y")]


async def test_the_inline_engine_cannot_write(sqlite_database: Database) -> None:
    async with sqlite_database.write() as session:
        await session.execute(text("CREATE TABLE t (a INTEGER)"))
    with pytest.raises(Exception, match="readonly"):
        async with sqlite_database.turn_read() as session:
            await session.execute(text("INSERT INTO t VALUES (1)"))
    async with sqlite_database.read() as session:
        assert (await session.execute(text("SELECT count(*) FROM t"))).scalar_one() == 0


async def test_a_failed_statement_rolls_the_write_back(sqlite_database: Database) -> None:
    async with sqlite_database.write() as session:
        await session.execute(text("CREATE TABLE t (a INTEGER UNIQUE)"))
    with pytest.raises(Exception, match="UNIQUE"):
        async with sqlite_database.write() as session:
            await session.execute(text("INSERT INTO t VALUES (1)"))
            await session.execute(text("INSERT INTO t VALUES (1)"))
    async with sqlite_database.turn_read() as session:
        assert (await session.execute(text("SELECT count(*) FROM t"))).scalar_one() == 0


@pytest.fixture
def locked_out(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """While the returned event is unset, every statement SQLite is given fails as
    SQLITE_BUSY does. (A reader in WAL mode is almost never refused for real, so the
    refusal is played here, at the driver's one call into SQLite.)"""
    open_again = threading.Event()
    real = sqlite_driver._run_statement

    def refusing(connection: sqlite3.Connection, *args: Any) -> Any:
        if not open_again.is_set():
            raise sqlite3.OperationalError("database is locked")
        return real(connection, *args)

    monkeypatch.setattr(sqlite_driver, "_run_statement", refusing)
    return open_again


async def test_inline_reader_waits_without_blocking_the_loop(
    sqlite_database: Database, locked_out: threading.Event
) -> None:
    locked_out.set()
    async with sqlite_database.write() as session:
        await session.execute(text("CREATE TABLE t (a INTEGER)"))
        await session.execute(text("INSERT INTO t VALUES (1)"))
    async with sqlite_database.turn_read() as session:  # connected and configured beforehand
        await session.execute(text("SELECT 1"))
    locked_out.clear()

    async def read() -> int:
        async with sqlite_database.turn_read() as session:
            return int((await session.execute(text("SELECT count(*) FROM t"))).scalar_one())

    with LoopTicks() as loop:
        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        assert not reader.done()
        # The loop kept running while the reader waited (about 30 ticks in 0.3 s).
        assert loop.ticks >= 10
        locked_out.set()
        assert await asyncio.wait_for(reader, 5) == 1


async def test_inline_reader_gives_up_as_database_busy(
    sqlite_database: Database, locked_out: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_driver, "BUSY_WAIT_SECONDS", 0.2)
    locked_out.set()
    async with sqlite_database.turn_read() as session:
        await session.execute(text("SELECT 1"))
    locked_out.clear()
    with pytest.raises(DatabaseBusy):
        async with sqlite_database.turn_read() as session:
            await session.execute(text("SELECT 2"))
