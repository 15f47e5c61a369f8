"""A streamed or WebSocket turn whose commit meets a PostgreSQL fault ends with the truth
(issue 23): the backend ended during the commit, the stream's last events say it was not
saved and nothing is; a commit that landed unacknowledged ends ``response.completed`` with
the stored id; and a turn whose commit and whose failure's record are both refused is
never told "stored as failed". Through the official SDK, as in test_database_faults.py
(whose proxy and server fixtures these share)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api import test_database_faults as faults
from tests.api.test_database_faults import (
    MODEL,
    post,
    slow_commits,
    stored_status,
    terminate_all,
    wait_for_backend,
)
from tests.conftest import RunningServer
from tests.support.clients import openai_client
from tests.support.sql import execute
from tests.support.tcp_proxy import TcpProxy
from tests.support.tenants import TenantKeys, create_tenant

# Every insert into responses is refused at COMMIT: the turn's own commit, and then the
# record of its failure, both fail with the database still reachable.
REFUSE_COMMITS = (
    """CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'refused by the test'; END $$""",
    """CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON responses
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()""",
)

Transport = Callable[[OpenAI], list[Any]]

# The same server behind the same proxy as test_database_faults.py's tests.
proxy = faults.proxy
served = faults.served


def over_http(client: OpenAI) -> list[Any]:
    return list(client.responses.create(model=MODEL, input="x", stream=True))


def over_websocket(client: OpenAI) -> list[Any]:
    events: list[Any] = []
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="x")
        for event in connection:
            events.append(event)
            if event.type in ("response.completed", "response.failed"):
                break
    return events


TRANSPORTS = pytest.mark.parametrize("transport", [over_http, over_websocket], ids=["sse", "ws"])


def streamed(server: RunningServer, tenant: TenantKeys, transport: Transport) -> list[Any]:
    return transport(openai_client(f"{server.url}/v1", tenant.api_key))


def in_thread(work: Callable[[], list[Any]]) -> tuple[threading.Thread, list[list[Any]]]:
    results: list[list[Any]] = []
    thread = threading.Thread(target=lambda: results.append(work()))
    thread.start()
    return thread, results


def ending(events: Iterable[Any]) -> tuple[Any, Any]:
    """The error event (or None) and the terminal event."""
    listed = list(events)
    errors = [event for event in listed if event.type == "error"]
    return (errors[-1] if errors else None), listed[-1]


@TRANSPORTS
def test_a_backend_ended_during_a_streamed_commit_ends_the_stream_as_not_saved(
    served: RunningServer, pg_url: str, transport: Transport
) -> None:
    tenant = create_tenant(served.db_url)
    slow_commits(pg_url)
    thread, results = in_thread(lambda: streamed(served, tenant, transport))
    terminate_all(pg_url, waiting_on="PgSleep")
    thread.join()
    error, terminal = ending(results[0])
    assert error is not None and error.code == "database_unavailable", error
    assert "was not saved" in error.message
    assert terminal.type == "response.failed"
    # The Response object's error code is OpenAI's enum; its message is the same truth.
    assert "was not saved" in terminal.response.error.message
    assert stored_status(served.db_url, tenant) == []


@TRANSPORTS
def test_a_streamed_commit_that_landed_unacknowledged_ends_completed(
    served: RunningServer, proxy: TcpProxy, pg_url: str, transport: Transport
) -> None:
    tenant = create_tenant(served.db_url)
    slow_commits(pg_url)
    thread, results = in_thread(lambda: streamed(served, tenant, transport))
    wait_for_backend(pg_url, "PgSleep")
    proxy.hold_replies()
    deadline = time.monotonic() + 20
    while stored_status(pg_url, tenant) != ["completed"]:
        assert time.monotonic() < deadline, "the commit never landed"
        time.sleep(0.05)
    proxy.cut()
    thread.join()
    error, terminal = ending(results[0])
    assert error is None, error
    assert terminal.type == "response.completed"
    retrieved = httpx.get(
        f"{served.url}/v1/responses/{terminal.response.id}",
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )
    assert retrieved.status_code == 200, retrieved.text
    assert retrieved.json()["status"] == "completed"


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_refused_commit_whose_failure_cannot_be_recorded_says_nothing_was_stored(
    served: RunningServer, pg_url: str, keyed: bool
) -> None:
    tenant = create_tenant(served.db_url)
    for statement in REFUSE_COMMITS:
        execute(pg_url, statement)
    key = uuid.uuid4().hex if keyed else None
    answer = post(served, tenant, {"model": MODEL, "input": "x"}, key)
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "database_unavailable"
    assert "nothing of it was stored" in error["message"]
    assert "stored as failed" not in error["message"]
    assert stored_status(served.db_url, tenant) == []
    if keyed:
        # Nothing was stored, so the key was released: a retry runs and is stored.
        execute(pg_url, "DROP TRIGGER refuse_commit ON responses")
        again = post(served, tenant, {"model": MODEL, "input": "x"}, key)
        assert again.status_code == 200, again.text
        assert again.headers.get("idempotent-replayed") is None
        assert stored_status(served.db_url, tenant) == ["completed"]
