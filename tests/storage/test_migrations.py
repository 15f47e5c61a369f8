"""One alembic tree for both databases: a single head, and upgrade/downgrade both run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
from sqlalchemy import inspect

from agentic_api.storage import migrate
from agentic_api.storage.database import Database
from agentic_api.storage.engine import create_engine
from agentic_api.storage.models import Base
from tests.storage.test_turn_store import new_tenant, sample_row
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url
from tests.support.sql import rows


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


def test_0009_fills_lost_tokens_from_accounts_even_with_a_nul(backend: str, tmp_path: Path) -> None:
    """Turns stored before 0009 get their lost tokens from their account's JSON, parsed in
    Python: PostgreSQL's own JSON operators fail on an account holding ``\\u0000``."""
    pg_name = None
    if backend == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        pg_name, url = create_pg_database()
    account = {
        "status": "exact",
        "lost": {"not_resident": 64, "partial_block": 7},
        "divergence": {"parent_pieces": ["model\x00said"], "child_pieces": ["\x00"]},
    }

    async def store() -> None:
        db = Database.from_url(url, pool_size=1)
        try:
            tenant_id = await new_tenant(db)
            async with db.write() as session:
                with_loss = sample_row("resp_lost", tenant_id)
                with_loss.token_account = account
                without = sample_row("resp_plain", tenant_id)
                session.add_all([with_loss, without])
        finally:
            await db.close()

    try:
        migrate.upgrade(url)
        asyncio.run(store())
        migrate.downgrade(url, "0008_console_pages")
        migrate.upgrade(url)
        found = {
            row[0]: (row[1], row[2])
            for row in rows(url, "SELECT id, lost_tokens, lost_by_cause FROM responses")
        }
        lost, by_cause = found["resp_lost"]
        assert lost == 71
        parsed = by_cause if isinstance(by_cause, dict) else orjson.loads(by_cause)
        assert parsed == {"not_resident": 64, "partial_block": 7}
        assert found["resp_plain"] == (None, None)
    finally:
        if pg_name:
            drop_pg_database(pg_name)
