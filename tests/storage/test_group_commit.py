"""SQLite's turn store commits the turns that queue behind a busy writer together
(``storage/turn_store/sqlite.py``), each turn still whole or not at all, with the rows a
turn written alone gets."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import text

from agentic_api.storage.database import Database
from agentic_api.storage.errors import DatabaseBusy
from agentic_api.storage.responses import NewItem
from agentic_api.storage.turn_store import grouped_rows
from agentic_api.storage.turn_store.sqlite import SqliteTurnStore
from agentic_api.storage.turn_store.store import SessionTurnStore
from tests.storage.test_turn_store import EVENTS, ITEMS, new_tenant, sample_row, stored
from tests.support.sqlite import WriteLockHolder, database_file


def sqlite_store(db: Database) -> SqliteTurnStore:
    store = db.turns
    assert isinstance(store, SqliteTurnStore)
    return store


@contextmanager
def writer_held(store: SqliteTurnStore) -> Iterator[None]:
    """Keeps the writer thread busy until the block ends, so inserts queue behind it."""
    release = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    store._writer_thread.submit(hold)
    started.wait(5)
    try:
        yield
    finally:
        release.set()


def counted_transactions(store: SqliteTurnStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per transaction the writer begins."""
    began: list[int] = []
    real = store._transaction

    def spy(statements: Callable[..., int]) -> None:
        began.append(1)
        real(statements)

    monkeypatch.setattr(store, "_transaction", spy)
    return began


async def queued_inserts(db: Database, tenant: str, ids: list[str]) -> list[BaseException | None]:
    store = sqlite_store(db)
    with writer_held(store):
        tasks = [
            asyncio.ensure_future(store.insert(sample_row(i, tenant), ITEMS, EVENTS)) for i in ids
        ]
        await asyncio.sleep(0.05)  # every insert is queued behind the held writer
        assert not any(task.done() for task in tasks)
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def test_turns_queued_behind_the_writer_commit_in_one_transaction(
    sqlite_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = sqlite_database
    tenant = await new_tenant(db)
    began = counted_transactions(sqlite_store(db), monkeypatch)
    ids = [f"resp_g{index}" for index in range(6)]
    assert await queued_inserts(db, tenant, ids) == [None] * 6
    assert len(began) == 1
    # Each with the rows it would have had written alone, through the repositories.
    await SessionTurnStore(db).insert(sample_row("resp_orm", tenant), ITEMS, EVENTS)
    alone = await stored(db, "resp_orm")
    for response_id in ids:
        assert await stored(db, response_id) == alone


async def test_a_failing_turn_in_a_group_fails_alone(
    sqlite_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = sqlite_database
    tenant = await new_tenant(db)
    await db.turns.insert(sample_row("resp_taken", tenant), [], [])
    began = counted_transactions(sqlite_store(db), monkeypatch)
    outcomes = await queued_inserts(db, tenant, ["resp_x", "resp_taken", "resp_y"])
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], Exception) and "unique" in str(outcomes[1]).lower()
    # The group rolled back whole, then each turn was written on its own.
    assert len(began) == 4
    assert await db.turns.checkpoint(tenant, "resp_x") is not None
    assert await db.turns.checkpoint(tenant, "resp_y") is not None
    async with db.read() as session:
        taken = await session.execute(
            text("SELECT count(*) FROM response_items WHERE response_id = 'resp_taken'")
        )
        assert taken.scalar_one() == 0


async def test_a_group_that_never_gets_the_lock_is_busy_for_every_turn(
    sqlite_database: Database, sqlite_file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentic_api.storage.turn_store import sqlite as sqlite_turn_store

    db = sqlite_database
    tenant = await new_tenant(db)
    monkeypatch.setattr(sqlite_turn_store, "SQLITE_BUSY_TIMEOUT_MS", 200)
    began = counted_transactions(sqlite_store(db), monkeypatch)
    with WriteLockHolder(database_file(sqlite_file_url)):
        outcomes = await queued_inserts(db, tenant, ["resp_a", "resp_b", "resp_c"])
    assert all(isinstance(outcome, DatabaseBusy) for outcome in outcomes)
    assert len({id(outcome) for outcome in outcomes}) == 3  # an error of its own each
    # Tried once, as a group: waiting for the lock again per turn would not help.
    assert len(began) == 1
    for response_id in ("resp_a", "resp_b", "resp_c"):
        assert await db.turns.checkpoint(tenant, response_id) is None


async def test_a_turn_cancelled_while_queued_is_never_written(sqlite_database: Database) -> None:
    db = sqlite_database
    tenant = await new_tenant(db)
    store = sqlite_store(db)
    with writer_held(store):
        kept = asyncio.ensure_future(store.insert(sample_row("resp_kept", tenant), ITEMS, []))
        dropped = asyncio.ensure_future(store.insert(sample_row("resp_gone", tenant), ITEMS, []))
        await asyncio.sleep(0.05)
        dropped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dropped
    await kept
    assert await db.turns.checkpoint(tenant, "resp_kept") is not None
    assert await db.turns.checkpoint(tenant, "resp_gone") is None


async def test_rows_beyond_one_statements_placeholders_are_split(
    sqlite_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = sqlite_database
    tenant = await new_tenant(db)
    store = sqlite_store(db)
    await store.insert(sample_row("resp_first", tenant), [], [])  # the writer has connected
    # Room for two item rows (seven columns each) per statement.
    monkeypatch.setattr(store, "_max_parameters", 15)
    sent: list[str] = []
    real = grouped_rows.multi_row

    def spy(sql: str, rows: int) -> str:
        sent.append(f"{sql.split()[2]}:{rows}")
        return real(sql, rows)

    monkeypatch.setattr(grouped_rows, "multi_row", spy)
    items = [NewItem(f"msg_{index}", "input", "message", "{}") for index in range(5)]
    await store.insert(sample_row("resp_many", tenant), items, EVENTS)
    assert [s for s in sent if s.startswith("response_items")] == [
        "response_items:2",
        "response_items:2",
        "response_items:1",
    ]
    positions = (await stored(db, "resp_many"))["items"]
    assert [row[0] for row in positions] == [0, 1, 2, 3, 4]


def test_multi_row_repeats_the_values_group() -> None:
    single = "INSERT INTO t (a, b) VALUES (?, ?)"
    assert grouped_rows.multi_row(single, 3) == "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?)"
    with pytest.raises(ValueError, match="single-row"):
        grouped_rows.multi_row("UPDATE t SET a = ?", 2)
