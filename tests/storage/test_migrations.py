"""One alembic tree for both databases: a single head, and upgrade/downgrade both run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import inspect

from agentic_api.storage import migrate
from agentic_api.storage.engine import create_engine
from agentic_api.storage.models import Base
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url


def test_single_head() -> None:
    assert len(migrate.heads()) == 1


def table_names(url: str) -> set[str]:
    async def run() -> set[str]:
        engine = create_engine(url, pool_size=1)
        try:
            async with engine.connect() as connection:
                return set(await connection.run_sync(lambda c: inspect(c).get_table_names()))
        finally:
            await engine.dispose()

    return asyncio.run(run())


def test_upgrade_downgrade_upgrade(backend: str, tmp_path: Path) -> None:
    pg_name = None
    if backend == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        pg_name, url = create_pg_database()
    try:
        migrate.upgrade(url)
        expected = set(Base.metadata.tables)
        assert expected <= table_names(url)
        migrate.downgrade(url, "base")
        assert table_names(url) <= {"alembic_version"}
        migrate.upgrade(url)
        assert expected <= table_names(url)
    finally:
        if pg_name:
            drop_pg_database(pg_name)


def test_durability_tables_come_and_go_with_0002(backend: str, tmp_path: Path) -> None:
    pg_name = None
    if backend == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        pg_name, url = create_pg_database()
    durability = {"background_jobs", "idempotency_keys"}
    try:
        migrate.upgrade(url, "0002")
        assert durability <= table_names(url)
        migrate.downgrade(url, "0001")
        tables = table_names(url)
        assert not durability & tables and "responses" in tables
        migrate.upgrade(url)
        assert durability <= table_names(url)
    finally:
        if pg_name:
            drop_pg_database(pg_name)
