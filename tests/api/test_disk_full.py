"""A full disk on SQLite (issue 23): the commit after the model ran fails with SQLITE_FULL,
the transaction is rolled back whole, and the answer says so: 503 ``storage_full``
(Retry-After), nothing stored, no failure claimed to be stored (storing it would need the
disk too), and a retry with the same Idempotency-Key agrees (it is not answered with a
stored failure).

The disk is "full" at the database's current size: ``PRAGMA max_page_count`` on every
connection that writes, which makes SQLite refuse a write past it with the same error
(SQLITE_FULL, "database or disk is full") as a file system out of space."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from agentic_api.app import create_app
from tests.conftest import RunningServer, server_settings
from tests.support.servers import ThreadedServer
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"
# More than the database has free: the commit needs new pages.
BIG_ANSWER = "x" * 400_000
FULL = "PRAGMA max_page_count = 1"  # SQLite raises it to the current size: no growth


@pytest.fixture
def served(sqlite_file_url: str, tmp_path: Path, sim: SimServer) -> Iterator[Any]:
    app = create_app(server_settings(sqlite_file_url, sim.url, tmp_path))
    running = ThreadedServer(app).start()
    try:
        yield (
            RunningServer(running.url, sqlite_file_url, app.state.services.settings, "sqlite"),
            app,
        )
    finally:
        running.stop()


def fill_the_disk(app: Any) -> None:
    db = app.state.services.db
    # Every connection SQLAlchemy's pool hands out from now on...

    @event.listens_for(db.engine.sync_engine, "checkout")
    def _full(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(FULL)
        cursor.close()

    # ...and the turn store's writer, on its own thread.
    store = db.turns

    def on_writer() -> None:
        assert store._writer is not None, "the writer connects at the first turn"
        store._writer.execute(FULL)

    asyncio.run(asyncio.to_thread(lambda: store._writer_thread.submit(on_writer).result()))
    # ...and its connection for the commits on the loop (the server's loop is idle now).
    store._inline_connection().execute(FULL)


def post(
    server: RunningServer, tenant: TenantKeys, body: dict[str, Any], key: str | None = None
) -> httpx.Response:
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    if key is not None:
        headers["idempotency-key"] = key
    return httpx.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_commit_on_a_full_disk_is_a_503_that_says_nothing_was_stored(
    served: Any, sim: SimServer, keyed: bool
) -> None:
    server, app = served
    tenant = create_tenant(server.db_url)
    key = uuid.uuid4().hex if keyed else None
    sim.push(Reply("before the disk filled"))
    assert post(server, tenant, {"model": MODEL, "input": "x"}).status_code == 200
    # The key's claim still fits in the pages the database has (its table is empty);
    # the answer's rows do not.
    fill_the_disk(app)
    sim.push(Reply(BIG_ANSWER))
    first = post(server, tenant, {"model": MODEL, "input": "x"}, key)
    assert first.status_code == 503, first.text
    assert first.headers.get("retry-after") == "1"
    error = first.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "storage_full"
    assert "Nothing of it was stored" in error["message"]
    assert "stored as failed" not in error["message"]
    assert (
        scalar(server.db_url, "SELECT count(*) FROM responses WHERE tenant_id = :t", t=tenant.id)
        == 1  # the turn before the disk filled
    )
    if keyed:
        # No stored failure to replay: the retry runs, and the disk refuses it again.
        sim.push(Reply(BIG_ANSWER))
        again = post(server, tenant, {"model": MODEL, "input": "x"}, key)
        assert again.status_code == 503, again.text
        assert again.headers.get("idempotent-replayed") is None
        assert again.json()["error"]["code"] == "storage_full"
