"""A response's events stored as runs (one row per run of consecutive sequence numbers),
read back one event at a time from any cursor, on both databases and through both
writers (the repositories and the turn store); rows from before runs still read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from sqlalchemy import text

from agentic_api.storage import migrate
from agentic_api.storage.database import Database
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.turn_rows import StoredEventsCorrupt, event_values, stored_events
from tests.storage.test_turn_store import new_tenant, sample_row
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url


def events(numbers: range | list[int]) -> list[tuple[int, str]]:
    # Text that would break a naive split: an escaped newline inside a string.
    return [
        (n, orjson.dumps({"type": "response.output_text.delta", "n": n, "d": "a\nb"}).decode())
        for n in numbers
    ]


def test_consecutive_events_are_one_row_and_gaps_start_another() -> None:
    rows = event_values("resp_a", events([0, 1, 2, 5, 6, 9]))
    assert [(r["sequence_number"], r["last_sequence_number"]) for r in rows] == [
        (0, 2),
        (5, 6),
        (9, 9),
    ]
    assert rows[2]["data"] == events([9])[0][1]
    assert event_values("resp_a", []) == []


def test_events_given_as_bytes_are_stored_as_the_same_text() -> None:
    # A committing turn passes the bytes its events were published with (one decode per
    # run, not per event); the rows must be the ones their text would make.
    written = events([0, 1, 2, 5, 6, 9])
    as_bytes = [(n, json.encode()) for n, json in written]
    assert event_values("resp_a", as_bytes) == event_values("resp_a", written)
    assert all(isinstance(r["data"], str) for r in event_values("resp_a", as_bytes))
    # Non-ASCII text survives the one decode of a joined run.
    accented = [(0, '{"d":"caf\u00e9 \u2713"}'.encode()), (1, '{"d":"café ✓"}'.encode())]
    assert event_values("r", accented)[0]["data"] == '{"d":"caf\u00e9 \u2713"}\n{"d":"café ✓"}'


def test_runs_read_back_from_any_cursor() -> None:
    written = events([0, 1, 2, 5, 6, 9])
    rows = [
        (r["sequence_number"], r["last_sequence_number"], r["data"])
        for r in event_values("r", written)
    ]
    assert stored_events(rows, None) == written
    assert stored_events(rows, -1) == written
    for cursor in range(-1, 11):
        assert stored_events(rows, cursor) == [e for e in written if e[0] > cursor], cursor
    # A row from before runs: its number only, one event.
    assert stored_events([(4, None, "{}")], 3) == [(4, "{}")]
    assert stored_events([(4, None, "{}")], 4) == []


def test_a_run_holding_fewer_events_than_its_numbers_is_refused() -> None:
    with pytest.raises(StoredEventsCorrupt):
        stored_events([(0, 3, "{}\n{}")], None)


async def test_both_writers_store_runs_that_read_back_exactly(db: Database) -> None:
    tenant = await new_tenant(db)
    written = events(range(300))
    await db.turns.insert(sample_row("resp_store", tenant), [], written)
    async with db.write() as session:
        repo = ResponseRepository(session)
        await repo.insert(sample_row("resp_repo", tenant), [])
        await repo.add_events("resp_repo", written[:16])
        await repo.add_events("resp_repo", written[16:])
    async with db.read() as session:
        repo = ResponseRepository(session)
        for response_id, row_count in (("resp_store", 1), ("resp_repo", 2)):
            assert await repo.events(response_id, None) == written
            assert await repo.events(response_id, 141) == written[142:]
            assert await repo.events(response_id, 299) == []
            assert await repo.last_sequence(response_id) == 299
            rows = (
                await session.execute(
                    text("SELECT count(*) FROM response_events WHERE response_id = :id"),
                    {"id": response_id},
                )
            ).scalar_one()
            assert rows == row_count
        assert await repo.last_sequence("resp_absent") == -1


async def test_rows_stored_before_runs_read_as_single_events(db: Database) -> None:
    tenant = await new_tenant(db)
    async with db.write() as session:
        await ResponseRepository(session).insert(sample_row("resp_old", tenant), [])
        for number, data in events([0, 1]):
            await session.execute(
                text(
                    "INSERT INTO response_events (response_id, sequence_number, data) "
                    "VALUES ('resp_old', :n, :d)"
                ),
                {"n": number, "d": data},
            )
        await ResponseRepository(session).add_events("resp_old", events([2, 3]))
    async with db.read() as session:
        repo = ResponseRepository(session)
        assert await repo.events("resp_old", None) == events([0, 1, 2, 3])
        assert await repo.events("resp_old", 0) == events([1, 2, 3])
        assert await repo.last_sequence("resp_old") == 3


def test_downgrade_splits_runs_back_into_one_row_per_event(backend: str, tmp_path: Path) -> None:
    pg_name = None
    if backend == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        pg_name, url = create_pg_database()
    written = events(range(5))

    async def store() -> None:
        database = Database.from_url(url)
        try:
            tenant = await new_tenant(database)
            await database.turns.insert(sample_row("resp_run", tenant), [], written)
        finally:
            await database.close()

    async def read() -> list[tuple[int, str]]:
        database = Database.from_url(url)
        try:
            async with database.read() as session:
                found = await session.execute(
                    text(
                        "SELECT sequence_number, data FROM response_events "
                        "WHERE response_id = 'resp_run' ORDER BY sequence_number"
                    )
                )
                return [(number, data) for number, data in found.all()]
        finally:
            await database.close()

    try:
        migrate.upgrade(url)
        asyncio.run(store())
        migrate.downgrade(url, "0003_hardening")
        assert asyncio.run(read()) == written
    finally:
        if pg_name:
            drop_pg_database(pg_name)
