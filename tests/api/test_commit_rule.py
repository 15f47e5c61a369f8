"""The commit rule (ARCHITECTURE.md, "Nothing fails after the model has run"): what the
database itself can still refuse at commit is retried once when nothing was written,
and otherwise stored as a failure the client sees; an idempotent retry after any 4xx or
5xx never runs the model twice. SQLite and PostgreSQL, each on a database of its own
(the failures are injected by triggers)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import BadRequestError

from agentic_api.app import create_app
from agentic_api.storage.errors import DatabaseBusy
from tests.conftest import RunningServer, server_settings
from tests.support.servers import ThreadedServer
from tests.support.sql import execute, scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Disconnect, Fail, Malformed, Reply, SimServer

MODEL = "sim-model"
# Output items holding this text cannot be stored (a trigger refuses them).
POISON = "this-output-cannot-be-stored"
SQLITE_TRIGGER = f"""CREATE TRIGGER refuse_poison BEFORE INSERT ON response_items
WHEN NEW.role = 'output' AND NEW.data LIKE '%{POISON}%'
BEGIN SELECT RAISE(ABORT, 'injected failure'); END"""
PG_FUNCTION = f"""CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.role = 'output' AND NEW.data LIKE '%{POISON}%' THEN
    RAISE EXCEPTION 'injected failure';
  END IF;
  RETURN NEW;
END $$"""
PG_TRIGGER = """CREATE TRIGGER refuse_poison BEFORE INSERT ON response_items
FOR EACH ROW EXECUTE FUNCTION refuse_poison()"""
# The first insert of an output item holding this text is aborted as a serialization
# failure (a sequence, unlike the aborted transaction, keeps its count).
ONCE = "aborted-once-then-stored"
PG_ONCE = f"""CREATE FUNCTION abort_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.role = 'output' AND NEW.data LIKE '%{ONCE}%' AND nextval('abort_once_seq') = 1 THEN
    RAISE EXCEPTION 'injected abort' USING ERRCODE = 'serialization_failure';
  END IF;
  RETURN NEW;
END $$"""


@pytest.fixture
def served(backend: str, fresh_db: str, tmp_path: Path, sim: SimServer) -> Iterator[Any]:
    if backend == "sqlite":
        execute(fresh_db, SQLITE_TRIGGER)
    else:
        execute(fresh_db, PG_FUNCTION)
        execute(fresh_db, PG_TRIGGER)
        execute(fresh_db, "CREATE SEQUENCE abort_once_seq")
        execute(fresh_db, PG_ONCE)
        execute(
            fresh_db,
            "CREATE TRIGGER abort_once BEFORE INSERT ON response_items "
            "FOR EACH ROW EXECUTE FUNCTION abort_once()",
        )
    app = create_app(server_settings(fresh_db, sim.url, tmp_path))
    running = ThreadedServer(app).start()
    try:
        yield RunningServer(running.url, fresh_db, app.state.services.settings, backend), app
    finally:
        running.stop()


def post(
    server: RunningServer, tenant: TenantKeys, body: dict[str, Any], key: str | None = None
) -> httpx.Response:
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    if key is not None:
        headers["idempotency-key"] = key
    return httpx.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=30)


def generations(sim: SimServer) -> int:
    """Requests that reached the model (refusals before generation do not count)."""
    return sum(1 for r in sim.requests("/v1/responses") if r.outcome not in ("rejected", "failed"))


@pytest.mark.parametrize("stream", [False, True])
def test_a_commit_the_database_refuses_is_stored_as_failed(
    served: Any, sim: SimServer, stream: bool
) -> None:
    server, _app = served
    tenant = create_tenant(server.db_url)
    key = uuid.uuid4().hex
    sim.push(Reply(POISON))
    first = post(server, tenant, {"model": MODEL, "input": "x", "stream": stream}, key)
    if stream:
        assert first.status_code == 200
        assert '"code":"commit_failed"' in first.text and "response.failed" in first.text
        assert "response.completed" not in first.text
    else:
        assert first.status_code == 500, first.text
        assert first.json()["error"]["code"] == "commit_failed"
    response_id = scalar(
        server.db_url, "SELECT id FROM responses WHERE tenant_id = :t", t=tenant.id
    )
    client = server.client(tenant, timeout=30)
    stored = client.responses.retrieve(response_id)
    # The Response object's error code is one OpenAI's schema allows; our reason is in the
    # stream's error event, the HTTP error and the message.
    assert stored.status == "failed" and stored.error and stored.error.code == "server_error"
    assert "could not be saved" in stored.error.message
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model=MODEL, input="x", previous_response_id=response_id)
    assert refused.value.code == "previous_response_not_continuable"
    # The same key replays the failure: the model does not run again.
    again = post(server, tenant, {"model": MODEL, "input": "x", "stream": stream}, key)
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.status_code == first.status_code
    assert generations(sim) == 1


def test_a_commit_that_wrote_nothing_is_retried_once(
    served: Any, backend: str, sim: SimServer
) -> None:
    server, app = served
    tenant = create_tenant(server.db_url)
    if backend == "sqlite":
        # SQLite's case is a write lock another process holds past the busy timeout;
        # raising it from the turn store keeps the test free of timing.
        store = app.state.services.db.turns
        real_insert = store.insert
        failures = iter([DatabaseBusy()])

        async def busy_once(*args: Any, **kwargs: Any) -> None:
            failure = next(failures, None)
            if failure is not None:
                raise failure
            await real_insert(*args, **kwargs)

        store.insert = busy_once
    sim.push(Reply(ONCE))
    response = post(server, tenant, {"model": MODEL, "input": "x"})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"
    assert generations(sim) == 1
    assert (
        scalar(server.db_url, "SELECT status FROM responses WHERE tenant_id = :t", t=tenant.id)
        == "completed"
    )
    if backend == "postgres":
        assert scalar(server.db_url, "SELECT last_value FROM abort_once_seq") == 2


# What can go wrong with a keyed request, and what the retry with the same key sees.
AFTER_ERRORS: list[tuple[str, Any, dict[str, Any], int]] = [
    ("invalid request (400)", None, {"temperature": "hot"}, 400),
    ("unknown parent (404)", None, {"previous_response_id": "resp_" + "0" * 48}, 404),
    ("upstream refusal (400)", Fail(status=400, message="no"), {}, 400),
    ("upstream failure (502)", Fail(status=500), {}, 502),
    ("answer lost mid-way (502)", Disconnect(after_events=3), {}, 502),
    ("malformed answer (502)", Malformed(body={"output": "x"}), {}, 502),
    ("commit refused (500)", Reply(POISON), {}, 500),
]


@pytest.mark.parametrize(
    ("case", "behavior", "extra", "status"), AFTER_ERRORS, ids=[c[0] for c in AFTER_ERRORS]
)
def test_an_idempotent_retry_after_an_error_never_runs_the_model_twice(
    served: Any,
    sim: SimServer,
    case: str,
    behavior: Any,
    extra: dict[str, Any],
    status: int,
) -> None:
    server, _app = served
    tenant = create_tenant(server.db_url)
    key = uuid.uuid4().hex
    body = {"model": MODEL, "input": "x", **extra}
    if behavior is not None:
        sim.push(behavior)
    first = post(server, tenant, body, key)
    assert first.status_code == status, first.text
    ran = generations(sim)
    assert ran <= 1
    if behavior is not None:
        # A refusal is the same refusal again (the model did not run: it may).
        sim.push(behavior)
    again = post(server, tenant, body, key)
    assert again.status_code == status, again.text
    assert again.json()["error"]["code"] == first.json()["error"]["code"]
    assert generations(sim) == ran, "the model ran again for a request it had answered"
