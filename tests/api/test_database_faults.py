"""PostgreSQL connection loss answers the truth (issue 23): before the model ran it is a 503
``database_unavailable`` with Retry-After and nothing runs; at the commit, the answer is
what the database holds (read back on a fresh connection), and a retry with the same
Idempotency-Key agrees; a connection that failed is never handed out again.

The server reaches PostgreSQL through a loopback proxy (``tests/support/tcp_proxy.py``),
which can cut every connection and refuse new ones (a restart, without restarting the
shared server) or hold replies back (a COMMIT that landed but was never acknowledged);
single backends are ended with ``pg_terminate_backend``, at the commit by a deferred
trigger that makes it wait."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.conftest import RunningServer, app_server
from tests.support.databases import pg_dsn
from tests.support.sql import execute, scalar
from tests.support.tcp_proxy import TcpProxy
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"
# Runs at COMMIT (deferred), so the commit itself waits: long enough for the test to act.
SLOW_COMMIT = (
    """CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$""",
    """CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON responses
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()""",
)


def slow_commits(url: str) -> None:
    for statement in SLOW_COMMIT:
        execute(url, statement)


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    host_port = pg_url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    running = TcpProxy(host, int(port))
    yield running
    running.close()


@pytest.fixture
def served(pg_url: str, proxy: TcpProxy, sim: SimServer, tmp_path: Path) -> Iterator[RunningServer]:
    with app_server("postgres", proxy.url_for(pg_url), sim.url, tmp_path) as running:
        yield RunningServer(running.url, pg_url, running.settings, "postgres")


def post(
    server: RunningServer, tenant: TenantKeys, body: dict[str, Any], key: str | None = None
) -> httpx.Response:
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    if key is not None:
        headers["idempotency-key"] = key
    return httpx.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=60)


def generations(sim: SimServer) -> int:
    return sum(1 for r in sim.requests("/v1/responses") if r.outcome not in ("rejected", "failed"))


def assert_unavailable(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 503, answer.text
    assert answer.headers.get("retry-after") == "1"
    error: dict[str, Any] = answer.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "database_unavailable"
    return error


def stored_status(db_url: str, tenant: TenantKeys) -> list[str]:
    found = scalar(
        db_url,
        "SELECT string_agg(status, ',' ORDER BY created_at) FROM responses WHERE tenant_id = :t",
        t=tenant.id,
    )
    return [] if found is None else str(found).split(",")


def test_a_database_out_of_reach_before_the_model_is_a_503_and_nothing_runs(
    served: RunningServer, proxy: TcpProxy, sim: SimServer
) -> None:
    tenant = create_tenant(served.db_url)
    sim.push(Reply("first"))
    first = post(served, tenant, {"model": MODEL, "input": "x"})
    assert first.status_code == 200, first.text
    parent = first.json()["id"]
    ran = generations(sim)
    with proxy.refusing():
        proxy.cut()
        # The parent's read, and an Idempotency-Key's claim: both before the model.
        assert_unavailable(
            post(served, tenant, {"model": MODEL, "input": "y", "previous_response_id": parent})
        )
        assert_unavailable(post(served, tenant, {"model": MODEL, "input": "y"}, uuid.uuid4().hex))
    assert generations(sim) == ran, "the model ran although the database was out of reach"
    assert stored_status(served.db_url, tenant) == ["completed"]
    # Back: the connections that failed were discarded, new ones serve the next request.
    sim.push(Reply("second"))
    again = post(served, tenant, {"model": MODEL, "input": "y", "previous_response_id": parent})
    assert again.status_code == 200, again.text


def test_backends_ended_and_a_restart_answer_200_or_503_never_500(
    served: RunningServer, proxy: TcpProxy, sim: SimServer, pg_url: str
) -> None:
    tenant = create_tenant(served.db_url)
    first = post(served, tenant, {"model": MODEL, "input": "x"})
    assert first.status_code == 200, first.text
    parent = first.json()["id"]
    statuses: list[int] = []
    bodies: list[str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            answer = post(
                served, tenant, {"model": MODEL, "input": "y", "previous_response_id": parent}
            )
            statuses.append(answer.status_code)
            if answer.status_code != 200:
                bodies.append(answer.text)

    workers = [threading.Thread(target=load) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        for _ in range(3):
            time.sleep(0.5)
            terminate_all(pg_url)
        time.sleep(0.5)
        # A restart: every connection cut, none accepted for a second.
        with proxy.refusing():
            proxy.cut()
            time.sleep(1.0)
        time.sleep(1.0)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert statuses and set(statuses) <= {200, 503}, bodies[:3]
    for body in bodies:
        assert '"code":"database_unavailable"' in body.replace(" ", ""), body
    # Recovered by itself: nothing broken is handed out again.
    for _ in range(5):
        answer = post(
            served, tenant, {"model": MODEL, "input": "z", "previous_response_id": parent}
        )
        assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_backend_ended_during_the_commit_is_answered_as_not_stored(
    served: RunningServer, sim: SimServer, pg_url: str, keyed: bool
) -> None:
    tenant = create_tenant(served.db_url)
    slow_commits(pg_url)
    key = uuid.uuid4().hex if keyed else None
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(post(served, tenant, {"model": MODEL, "input": "x"}, key))
    )
    request.start()
    terminate_all(pg_url, waiting_on="PgSleep")
    request.join()
    error = assert_unavailable(answers[0])
    assert "was not saved" in error["message"]
    assert stored_status(served.db_url, tenant) == []
    if keyed:
        # The answer said nothing was kept, and the retry agrees: it runs and is stored.
        execute(pg_url, "DROP TRIGGER slow_commit ON responses")
        again = post(served, tenant, {"model": MODEL, "input": "x"}, key)
        assert again.status_code == 200, again.text
        assert again.headers.get("idempotent-replayed") is None
        assert stored_status(served.db_url, tenant) == ["completed"]


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_commit_that_landed_unacknowledged_is_answered_as_completed(
    served: RunningServer, proxy: TcpProxy, sim: SimServer, pg_url: str, keyed: bool
) -> None:
    tenant = create_tenant(served.db_url)
    slow_commits(pg_url)
    key = uuid.uuid4().hex if keyed else None
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(post(served, tenant, {"model": MODEL, "input": "x"}, key))
    )
    request.start()
    wait_for_backend(pg_url, "PgSleep")
    # The COMMIT goes on and lands; its acknowledgement never reaches the server.
    proxy.hold_replies()
    deadline = time.monotonic() + 20
    while stored_status(pg_url, tenant) != ["completed"]:
        assert time.monotonic() < deadline, "the commit never landed"
        time.sleep(0.05)
    proxy.cut()
    request.join()
    first = answers[0]
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "completed"
    assert first.json()["id"] == scalar(
        pg_url, "SELECT id FROM responses WHERE tenant_id = :t", t=tenant.id
    )
    ran = generations(sim)
    if keyed:
        again = post(served, tenant, {"model": MODEL, "input": "x"}, key)
        assert again.status_code == 200, again.text
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.json()["id"] == first.json()["id"]
        assert generations(sim) == ran, "the model ran again for a stored response"


def terminate_all(url: str, *, waiting_on: str | None = None) -> None:
    """Ends the database's backends (but the caller's); with ``waiting_on``, once one of
    them waits on that event, and only those."""
    if waiting_on is not None:
        wait_for_backend(url, waiting_on)

    async def run() -> None:
        admin = await asyncpg.connect(pg_dsn(url))
        try:
            await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND ($1::text IS NULL OR wait_event = $1)",
                waiting_on,
            )
        finally:
            await admin.close()

    asyncio.run(run())


def wait_for_backend(url: str, wait_event: str) -> None:
    deadline = time.monotonic() + 30
    while not scalar(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event = :event",
        event=wait_event,
    ):
        assert time.monotonic() < deadline, f"no backend waited on {wait_event}"
        time.sleep(0.05)
