"""The SQLite turn store writes and reads exactly what the repositories do."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from agentic_api.storage.database import Database
from agentic_api.storage.errors import DatabaseBusy
from agentic_api.storage.models import Response
from agentic_api.storage.responses import NewItem, ResponseRepository
from agentic_api.storage.tenants import TenantRepository
from agentic_api.storage.turn_store.postgres import PostgresTurnStore
from agentic_api.storage.turn_store.sqlite import SqliteTurnStore
from agentic_api.storage.turn_store.statements import TurnInsert
from agentic_api.storage.turn_store.store import SessionTurnStore
from tests.support.sqlite import LoopTicks, WriteLockHolder, database_file

STORES = {"sqlite": SqliteTurnStore, "postgresql": PostgresTurnStore}


async def new_tenant(db: Database) -> str:
    async with db.write() as session:
        return (await TenantRepository(session).create("t")).id


def sample_row(response_id: str, tenant_id: str) -> Response:
    created = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)
    return Response(
        id=response_id,
        tenant_id=tenant_id,
        conversation_id=None,
        previous_response_id=None,
        session_id="resp_root",
        depth=3,
        status="completed",
        model="m",
        created_at=created,
        completed_at=created + timedelta(seconds=2),
        updated_at=created + timedelta(seconds=2),
        store=True,
        background=False,
        body={"id": response_id, "text": "héllo \u2028 ☃", "n": 1.5, "none": None},
        request={"model": "m", "input": [{"type": "message"}]},
        error=None,
        input_tokens=10,
        cached_tokens=4,
        output_tokens=2,
        fingerprint={"model": "m", "tool_names": ["a"]},
        fingerprint_digest="f" * 64,
        fingerprint_changes=[],
        salt_epoch=0,
        prefix_digest="d" * 64,
        history_item_count=2,
        input_item_count=1,
        output_item_count=1,
        conversation_position=None,
    )


ITEMS = [
    NewItem("msg_1", "input", "message", '{"role":"user","type":"message"}'),
    NewItem("msg_2", "output", "message", '{"role":"assistant","type":"message"}'),
]
EVENTS = [(0, '{"type":"response.created"}'), (1, '{"type":"response.completed"}')]


async def stored(db: Database, response_id: str) -> dict[str, Any]:
    """Everything the database holds for a response, as raw SQL sees it (minus its id)."""
    async with db.read() as session:
        row = (
            (
                await session.execute(
                    text("SELECT * FROM responses WHERE id = :id"), {"id": response_id}
                )
            )
            .mappings()
            .one()
        )
        items = (
            await session.execute(
                text(
                    "SELECT position, tenant_id, item_id, role, type, data FROM response_items "
                    "WHERE response_id = :id ORDER BY position"
                ),
                {"id": response_id},
            )
        ).all()
        events = (
            await session.execute(
                text(
                    "SELECT sequence_number, last_sequence_number, data FROM response_events "
                    "WHERE response_id = :id ORDER BY sequence_number"
                ),
                {"id": response_id},
            )
        ).all()
    values = {key: value for key, value in row.items() if key != "id"}
    # The stored object names its response; the rest must match (SQLite: to the byte).
    body = values["body"]
    values["body"] = (
        body.replace(response_id, "<id>") if isinstance(body, str) else {**body, "id": "<id>"}
    )
    return {"row": values, "items": [tuple(i) for i in items], "events": [tuple(e) for e in events]}


async def test_rows_written_by_either_store_are_identical(db: Database) -> None:
    tenant = await new_tenant(db)
    assert isinstance(db.turns, STORES[db.dialect])
    await db.turns.insert(sample_row("resp_fast", tenant), ITEMS, EVENTS)
    await SessionTurnStore(db).insert(sample_row("resp_orm", tenant), ITEMS, EVENTS)
    fast, orm = await stored(db, "resp_fast"), await stored(db, "resp_orm")
    assert fast == orm
    assert len(fast["items"]) == 2
    # The two events are one run: one row (storage/turn_rows.py).
    assert fast["events"] == [(0, 1, "\n".join(data for _, data in EVENTS))]


async def test_checkpoints_read_by_either_store_are_identical(db: Database) -> None:
    tenant = await new_tenant(db)
    await SessionTurnStore(db).insert(sample_row("resp_a", tenant), ITEMS, [])
    fast = await db.turns.checkpoint(tenant, "resp_a")
    async with db.read() as session:
        orm = await ResponseRepository(session).get(tenant, "resp_a", documents=False)
    assert fast is not None and orm is not None
    columns = [c.key for c in Response.__table__.columns if c.key not in ("body", "request")]
    assert {c: getattr(fast, c) for c in columns} == {c: getattr(orm, c) for c in columns}
    assert fast.created_at.tzinfo is not None and fast.store is True
    # Scoped to the tenant and to live responses, as the repository is.
    assert await db.turns.checkpoint("ten_other", "resp_a") is None
    async with db.write() as session:
        await ResponseRepository(session).mark_deleted(tenant, "resp_a")
    assert await db.turns.checkpoint(tenant, "resp_a") is None


async def test_a_failed_insert_leaves_nothing(db: Database) -> None:
    tenant = await new_tenant(db)
    duplicate = [*ITEMS, NewItem("msg_3", "output", "message", "{}")]
    await db.turns.insert(sample_row("resp_a", tenant), [], [])
    # Same response id again: the row insert fails, and nothing of this turn is kept.
    with pytest.raises(Exception, match=r"(?i)unique"):
        await db.turns.insert(sample_row("resp_a", tenant), duplicate, EVENTS)
    async with db.read() as session:
        count = await session.execute(text("SELECT count(*) FROM response_items"))
        assert count.scalar_one() == 0
    # The connection is usable afterwards.
    await db.turns.insert(sample_row("resp_b", tenant), ITEMS, [])


async def test_sqlite_inserts_run_on_the_loop_except_one_that_may_restart_the_wal(
    sqlite_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Restarting the WAL syncs its header (an fsync): never on the event loop's thread.
    # Every other commit runs there (on the writer thread it waited for the GIL).
    from agentic_api.storage.turn_store import sqlite as sqlite_turn_store

    monkeypatch.setattr(sqlite_turn_store, "FOLD_WAL_EVERY_COMMITS", 3)
    tenant = await new_tenant(sqlite_database)
    store = sqlite_database.turns
    assert isinstance(store, SqliteTurnStore)
    threads: list[str] = []
    write = sqlite_turn_store._write_on

    def spy(connection: Any, turn: TurnInsert) -> None:
        threads.append(threading.current_thread().name)
        write(connection, turn)

    monkeypatch.setattr(sqlite_turn_store, "_write_on", spy)
    for index in range(5):
        await store.insert(sample_row(f"resp_t{index}", tenant), ITEMS, [])
        await asyncio.sleep(0.05)  # lets a fold finish before the next commit
    loop = threading.current_thread().name
    # The store's first commit, then three on the loop (the third starts a fold), then
    # the first after the fold on the writer thread again, as the loop's last.
    assert [name == loop for name in threads] == [False, True, True, False, True]
    assert all(name.startswith("sqlite-turn-writer") for name in threads if name != loop)
    for index in range(5):
        assert await store.checkpoint(tenant, f"resp_t{index}") is not None


async def test_an_insert_on_the_loop_waits_for_the_write_lock_without_blocking_it(
    sqlite_database: Database, sqlite_file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentic_api.storage.sqlite import drivers

    db = sqlite_database
    tenant = await new_tenant(db)
    await db.turns.insert(sample_row("resp_first", tenant), [], [])  # the writer thread's
    monkeypatch.setattr(drivers, "BUSY_WAIT_SECONDS", 0.3)
    with LoopTicks() as loop:
        holder = WriteLockHolder(database_file(sqlite_file_url))
        with holder, pytest.raises(DatabaseBusy):
            await db.turns.insert(sample_row("resp_a", tenant), ITEMS, [])
        assert loop.ticks >= 10  # the loop ran on while the insert waited
        assert await db.turns.checkpoint(tenant, "resp_a") is None
        # Once the lock is free, waited for: it commits.
        with WriteLockHolder(database_file(sqlite_file_url)) as held:
            asyncio.get_running_loop().call_later(0.1, held.release)
            monkeypatch.setattr(drivers, "BUSY_WAIT_SECONDS", 5.0)
            await db.turns.insert(sample_row("resp_a", tenant), ITEMS, [])
        assert await db.turns.checkpoint(tenant, "resp_a") is not None


async def test_insert_waits_for_the_write_lock_then_gives_up_as_busy(
    sqlite_database: Database, sqlite_file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentic_api.storage.turn_store import sqlite as sqlite_turn_store

    db = sqlite_database
    tenant = await new_tenant(db)
    # (read when the writer thread first connects)
    monkeypatch.setattr(sqlite_turn_store, "SQLITE_BUSY_TIMEOUT_MS", 200)
    with WriteLockHolder(database_file(sqlite_file_url)), pytest.raises(DatabaseBusy):
        await db.turns.insert(sample_row("resp_a", tenant), ITEMS, [])
    assert await db.turns.checkpoint(tenant, "resp_a") is None
    await db.turns.insert(sample_row("resp_a", tenant), ITEMS, [])
    assert await db.turns.checkpoint(tenant, "resp_a") is not None


async def test_sqlite_wal_folds_run_on_their_own_thread_every_so_many_commits(
    sqlite_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentic_api.storage.turn_store import sqlite as sqlite_turn_store

    monkeypatch.setattr(sqlite_turn_store, "FOLD_WAL_EVERY_COMMITS", 3)
    threads: list[str] = []
    real = sqlite_turn_store._fold_wal

    def spy(database: str) -> None:
        threads.append(threading.current_thread().name)
        real(database)

    monkeypatch.setattr(sqlite_turn_store, "_fold_wal", spy)
    tenant = await new_tenant(sqlite_database)
    for index in range(7):
        await sqlite_database.turns.insert(sample_row(f"resp_{index}", tenant), ITEMS, EVENTS)
        await asyncio.sleep(0.05)  # lets a fold finish before the next is due
    assert len(threads) == 2
    assert all(name.startswith("sqlite-wal-fold") for name in threads)
    # ... and never inside a commit: the writer's connection does not fold the WAL.
    store = sqlite_database.turns
    assert isinstance(store, SqliteTurnStore)

    def writer_setting() -> int:
        assert store._writer is not None
        return int(store._writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    assert store._writer_thread.submit(writer_setting).result() == 0
    assert store._inline is not None
    assert int(store._inline.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
