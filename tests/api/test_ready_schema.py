"""/ready says ready only on a database with this release's schema (issue 23: a database
never migrated looked ready): one migrated by a later release while this one runs, or
whose schema is gone, is not ready; an app built on one never starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from agentic_api.app import build_services
from agentic_api.storage.migrate import SchemaNotCurrent, downgrade
from tests.conftest import app_server, server_settings
from tests.support.sql import execute
from tests.upstream_sim import SimServer

NEWER = "9999_from_a_later_release"


def test_ready_is_not_ready_once_the_schema_is_not_this_releases(
    backend: str, fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    with app_server(backend, fresh_db, sim.url, tmp_path) as server:
        ready = httpx.get(f"{server.url}/ready", timeout=30)
        assert ready.status_code == 200, ready.text
        execute(fresh_db, "UPDATE alembic_version SET version_num = :newer", newer=NEWER)
        not_ready = httpx.get(f"{server.url}/ready", timeout=30)
        assert not_ready.status_code == 503, not_ready.text
        body = not_ready.json()
        assert body["failing"] == ["database"]
        assert body["database"] == {"ok": False, "error": "SchemaNotCurrent"}


def test_an_app_never_starts_on_a_database_never_migrated(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    downgrade(fresh_db)
    settings = server_settings(fresh_db, sim.url, tmp_path)
    with pytest.raises(SchemaNotCurrent, match="agentic-api migrate"):
        asyncio.run(build_services(settings))
