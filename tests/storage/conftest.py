"""Databases opened for the storage tests: ``db`` on each selected backend, ``sqlite_db``
and ``pg_db`` for one backend's specifics; each closed after its test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentic_api.storage.database import Database


async def _opened(url: str) -> AsyncIterator[Database]:
    database = Database.from_url(url)
    yield database
    await database.close()


@pytest.fixture
async def db(fresh_db: str) -> AsyncIterator[Database]:
    """SQLite and PostgreSQL, each with its own turn store."""
    async for database in _opened(fresh_db):
        yield database


@pytest.fixture
async def sqlite_db(sqlite_file_url: str) -> AsyncIterator[Database]:
    async for database in _opened(sqlite_file_url):
        yield database


@pytest.fixture
async def pg_db(pg_url: str) -> AsyncIterator[Database]:
    async for database in _opened(pg_url):
        yield database
