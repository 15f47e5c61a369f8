"""PostgreSQL's pool pings a connection only after it sat idle (storage/engine.py): one
whose server side went away meanwhile is replaced at checkout, and one in steady use is
handed out without a round trip."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from agentic_api.storage import engine as engine_module
from agentic_api.storage.database import Database
from agentic_api.storage.engine import create_engine
from tests.support.databases import pg_dsn


@pytest.fixture
async def pg_engine(pg_url: str) -> AsyncIterator[tuple[AsyncEngine, str]]:
    engine = create_engine(pg_url, pool_size=1)
    yield engine, pg_url
    await engine.dispose()


async def backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def terminate(url: str, pid: int) -> None:
    admin = await asyncpg.connect(pg_dsn(url))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        # Gone for the server before the test goes on (the client learns it on its next use).
        for _ in range(500):
            if not await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid
            ):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"backend {pid} still runs 5 s after it was terminated")
    finally:
        await admin.close()


async def test_an_idle_connection_that_died_is_replaced_at_checkout(
    pg_engine: tuple[AsyncEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, url = pg_engine
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_SECONDS", 0.0)
    first = await backend_pid(engine)
    await terminate(url, first)
    # Pinged at checkout, found dead, replaced: the statement runs on a new backend.
    assert await backend_pid(engine) != first


async def test_a_connection_in_steady_use_is_not_pinged(
    pg_engine: tuple[AsyncEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, url = pg_engine
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_SECONDS", 3600.0)
    first = await backend_pid(engine)
    assert await backend_pid(engine) == first
    await terminate(url, first)
    # Not pinged (used a moment ago): the dead connection reaches the statement, which
    # is what the ping after idleness exists to prevent.
    # (asyncpg words it several ways, depending on when it read the server's goodbye.)
    with pytest.raises(Exception, match=r"(?i)connection|terminat|another operation"):
        await backend_pid(engine)


async def test_the_turn_stores_own_pool_replaces_connections_the_server_closed(
    pg_url: str,
) -> None:
    database = Database.from_url(pg_url)
    try:
        assert await database.turns.checkpoint("ten_none", "resp_none") is None
        admin = await asyncpg.connect(pg_dsn(pg_url))
        try:
            ended = await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert ended and all(row[0] for row in ended)
        finally:
            await admin.close()
        # The client learns of the closed connection when its loop next runs.
        await asyncio.sleep(0.2)
        assert await database.turns.checkpoint("ten_none", "resp_none") is None
    finally:
        await database.close()


async def test_the_turn_stores_connections_go_back_to_its_pool_without_a_reset(
    pg_url: str,
) -> None:
    # asyncpg's default reset is a round trip of its own on every release; the store's
    # statements leave nothing to reset. The server shows each connection's last query.
    database = Database.from_url(pg_url)
    try:
        for _ in range(3):
            assert await database.turns.checkpoint("ten_none", "resp_none") is None
        admin = await asyncpg.connect(pg_dsn(pg_url))
        try:
            last = [
                row[0]
                for row in await admin.fetch(
                    "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )
            ]
        finally:
            await admin.close()
        assert last and all("FROM responses" in query for query in last), last
    finally:
        await database.close()
