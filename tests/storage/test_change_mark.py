"""``Database.change_mark`` (``storage/sqlite/change_mark.py``): on SQLite a value that
changes with every commit of anyone — this process's sessions and turn store, another
``Database``, another process — and stays put while nobody commits; on PostgreSQL None
(callers look every time). And ``JobRepository.earliest_lease_end``, which lets the sweep
skip its look until a lease can have run out."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from agentic_api.storage.database import Database
from agentic_api.storage.jobs import JobRepository
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.sqlite.change_mark import ChangeMark
from agentic_api.storage.tenants import TenantRepository
from tests.storage.test_turn_store import sample_row

START = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


async def add_tenant(db: Database, name: str) -> None:
    async with db.write() as session:
        await TenantRepository(session).create(name)


async def test_the_mark_stays_while_nobody_commits(sqlite_db: Database) -> None:
    db = sqlite_db
    first = db.change_mark()
    assert first is not None
    async with db.read() as session:
        await session.execute(text("SELECT count(*) FROM tenants"))
    async with db.turn_read() as session:
        await session.execute(text("SELECT count(*) FROM responses"))
    assert db.change_mark() == first
    assert db.change_mark() == first


async def test_a_commit_through_this_database_changes_the_mark(sqlite_db: Database) -> None:
    db = sqlite_db
    before = db.change_mark()
    await add_tenant(db, "one")
    after = db.change_mark()
    assert after is not None and after != before
    assert db.change_mark() == after


async def test_a_commit_through_another_database_object_changes_the_mark(
    sqlite_db: Database, sqlite_file_url: str
) -> None:
    db = sqlite_db
    other = Database.from_url(sqlite_file_url)
    try:
        before = db.change_mark()
        await add_tenant(other, "elsewhere")
        assert db.change_mark() != before
    finally:
        await other.close()


async def test_a_commit_by_another_process_changes_the_mark(sqlite_db: Database) -> None:
    db = sqlite_db
    path = db.engine.url.database
    assert path
    script = (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute(sys.argv[2])\n"
        "c.close()\n"
    )
    marks = [db.change_mark()]
    for statement in ("CREATE TABLE scratch (x INTEGER)", "INSERT INTO scratch VALUES (1)"):
        writer = await asyncio.create_subprocess_exec(sys.executable, "-c", script, path, statement)
        assert await asyncio.wait_for(writer.wait(), 60) == 0
        marks.append(db.change_mark())
    assert None not in marks
    assert len(set(marks)) == 3, marks


async def test_a_reopened_connection_never_repeats_an_old_mark(sqlite_db: Database) -> None:
    path = sqlite_db.engine.url.database
    assert path
    marks = ChangeMark(path)
    try:
        first = marks.read()
        # As after an error: data_version's numbers start afresh on the new connection,
        # and may equal the old one's though commits were missed in between.
        marks.close()
        second = marks.read()
        assert first is not None and second is not None
        assert second != first
        assert marks.read() == second
    finally:
        marks.close()


async def test_an_unreadable_database_gives_no_mark(tmp_path: Path) -> None:
    for missing in (tmp_path / "no-such-folder" / "db.sqlite", tmp_path / "not-yet.sqlite"):
        database = Database.from_url(f"sqlite+aiosqlite:///{missing}")
        try:
            assert database.change_mark() is None
        finally:
            await database.close()
        # Asking made no database file.
        assert not missing.exists()


async def test_postgres_has_no_mark(pg_db: Database) -> None:
    db = pg_db
    assert db.change_mark() is None
    await add_tenant(db, "one")
    assert db.change_mark() is None


async def test_the_earliest_lease_end_follows_the_running_jobs(db: Database) -> None:
    async with db.write() as session:
        tenant_id = (await TenantRepository(session).create("t")).id
        for index, response_id in enumerate(("resp_a", "resp_b")):
            await ResponseRepository(session).insert(sample_row(response_id, tenant_id), [])
            await JobRepository(session).enqueue(
                response_id, tenant_id, START + timedelta(seconds=index)
            )

    async def lease_end() -> datetime | None:
        async with db.read() as session:
            return await JobRepository(session).earliest_lease_end()

    assert await lease_end() is None  # queued jobs hold no lease
    ends = {"a": START + timedelta(seconds=30), "b": START + timedelta(seconds=20)}
    for worker in ("a", "b"):
        async with db.write() as session:
            claimed = await JobRepository(session).claim_next(
                worker_id=worker, token=f"tok-{worker}", now=START, lease_until=ends[worker]
            )
        assert claimed is not None
    assert await lease_end() == ends["b"]
    async with db.write() as session:
        assert await JobRepository(session).finish("resp_b", "tok-b")
    assert await lease_end() == ends["a"]
    async with db.write() as session:
        assert await JobRepository(session).finish("resp_a", "tok-a")
    assert await lease_end() is None
