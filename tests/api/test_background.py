"""Background mode through the official SDK: queued -> in_progress -> terminal, events
followed while they are produced, cancel, failures, recovery rules and shutdown (on
SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from openai import BadRequestError, NotFoundError, OpenAI
from sqlalchemy import update

from agentic_api.storage.database import Database
from agentic_api.storage.models import BackgroundJob
from tests.conftest import RunningServer, running_server
from tests.support.sql import execute, rows, scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Fail, Hang, Reply, SimServer, StreamError

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


def wait_status(client: OpenAI, response_id: str, wanted: set[str], timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        response = client.responses.retrieve(response_id)
        if response.status in wanted:
            return response
        assert time.monotonic() < deadline, f"still {response.status}, wanted {wanted}"
        time.sleep(0.02)


def raw_events(server: RunningServer | Any, tenant: TenantKeys, response_id: str, **params: Any):
    """The response's SSE stream, read to its end (events as dicts)."""
    with httpx.stream(
        "GET",
        f"{server.url}/v1/responses/{response_id}",
        params={"stream": "true", **params},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    ) as response:
        assert response.status_code == 200
        return [
            orjson.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")
        ]


def upstream_inputs(sim: SimServer) -> list[str]:
    return [r.body.decode() for r in sim.requests("/v1/responses")]


def test_background_response_is_queued_then_runs_and_continues(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("done in the background", delay=0.6), Reply("and continued"))
    queued = client.responses.create(model=sim.config.model, input="slow work", background=True)
    assert queued.status == "queued" and queued.background is True
    assert queued.output == [] and queued.usage is None
    # The input is stored at enqueue, with the ids the worker's run keeps.
    stored_input = [i.id for i in client.responses.input_items.list(queued.id)]
    assert len(stored_input) == 1
    seen: set[str | None] = {queued.status}
    deadline = time.monotonic() + 15
    while (current := client.responses.retrieve(queued.id)).status not in TERMINAL:
        seen.add(current.status)
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert seen == {"queued", "in_progress"}
    assert current.status == "completed" and current.output_text == "done in the background"
    assert current.created_at == queued.created_at
    assert [i.id for i in client.responses.input_items.list(queued.id)] == stored_input
    later = client.responses.create(
        model=sim.config.model, input="go on", previous_response_id=queued.id
    )
    assert later.output_text == "and continued"
    replayed = sim.last("/v1/responses").json["input"]
    assert [item["type"] for item in replayed] == ["message", "message", "message"]
    assert replayed[0]["id"] == stored_input[0] and replayed[1]["id"] == current.output[0].id
    assert "slow work" in str(replayed[0]) and "done in the background" in str(replayed[1])


def test_events_are_followed_while_the_job_runs(
    server: RunningServer, client: OpenAI, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("one two three four five six", event_delay=0.05))
    queued = client.responses.create(model=sim.config.model, input="stream me", background=True)
    stream = client.responses.retrieve(queued.id, stream=True)
    events = list(stream)
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
        "one two three four five six"
    )
    assert events[-1].response.output_text == client.responses.retrieve(queued.id).output_text
    # Resuming after a cursor gives exactly the rest, from storage, for a finished job too.
    rest = raw_events(server, tenant, queued.id, starting_after=3)
    assert [e["sequence_number"] for e in rest] == list(range(4, len(events)))


def test_a_queued_job_is_followed_before_it_starts_and_can_be_cancelled(
    server: RunningServer, client: OpenAI, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    sim.push(Hang(), Reply("second job's answer"))
    # The server has one worker: the first job holds it, the others wait in the queue.
    first = client.responses.create(model=model, input="job A", background=True)
    try:
        wait_status(client, first.id, {"in_progress"})
        second = client.responses.create(model=model, input="job B", background=True)
        third = client.responses.create(model=model, input="job C", background=True)
        followed: list[Any] = []
        follower = threading.Thread(
            target=lambda: followed.extend(client.responses.retrieve(second.id, stream=True))
        )
        follower.start()
        time.sleep(0.3)
        assert client.responses.retrieve(second.id).status == "queued"
        assert not followed

        cancelled = client.responses.cancel(third.id)
        assert cancelled.status == "cancelled" and cancelled.id == third.id
        assert [e["type"] for e in raw_events(server, tenant, third.id)] == ["response.cancelled"]
    finally:
        client.responses.cancel(first.id)
    assert sim.wait_aborted(1)
    follower.join(timeout=15)
    assert followed and followed[-1].type == "response.completed"
    assert followed[-1].response.output_text == "second job's answer"
    inputs = upstream_inputs(sim)
    assert len(inputs) == 2 and not any("job C" in body for body in inputs)


def test_background_stream_create_follows_the_job(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("streamed from the queue", event_delay=0.02))
    events = list(
        client.responses.create(model=sim.config.model, input="x", background=True, stream=True)
    )
    assert events[0].type == "response.created" and events[0].response.background is True
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "streamed from the queue"


def test_cancel_of_a_running_job_aborts_the_upstream_request(
    server: RunningServer, client: OpenAI, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Hang(after_events=3))
    queued = client.responses.create(model=sim.config.model, input="forever", background=True)
    wait_status(client, queued.id, {"in_progress"})
    assert sim.wait_for(lambda: sim.calls("/v1/responses") == 1)
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert sim.wait_aborted(1)
    assert client.responses.retrieve(queued.id).status == "cancelled"
    # Cancelling again (or later) returns it as it is.
    assert client.responses.cancel(queued.id).model_dump() == cancelled.model_dump()
    events = raw_events(server, tenant, queued.id)
    assert events[-1]["type"] == "response.cancelled"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(
            model=sim.config.model, input="more", previous_response_id=queued.id
        )
    assert refused.value.code == "previous_response_not_continuable"
    assert (
        scalar(
            server.db_url,
            "SELECT count(*) FROM background_jobs WHERE response_id = :id",
            id=queued.id,
        )
        == 0
    )


def test_cancel_rules(server: RunningServer, client: OpenAI, sim: SimServer) -> None:
    foreground = client.responses.create(model=sim.config.model, input="now")
    with pytest.raises(BadRequestError) as not_background:
        client.responses.cancel(foreground.id)
    assert not_background.value.code == "response_not_cancellable"
    with pytest.raises(NotFoundError):
        client.responses.cancel("resp_unknown")
    done = client.responses.create(model=sim.config.model, input="bg", background=True)
    finished = wait_status(client, done.id, TERMINAL)
    assert client.responses.cancel(done.id).model_dump() == finished.model_dump()
    stranger = server.client(create_tenant(server.db_url))
    with pytest.raises(NotFoundError):
        stranger.responses.cancel(done.id)


@pytest.mark.parametrize(
    "behavior",
    [Fail(status=400, message="no such thing"), StreamError(after_events=2)],
    ids=["refused", "mid-stream"],
)
def test_background_failures_are_stored_with_their_stream(
    server: RunningServer,
    client: OpenAI,
    tenant: TenantKeys,
    sim: SimServer,
    behavior: Any,
) -> None:
    sim.push(behavior)
    queued = client.responses.create(model=sim.config.model, input="fail me", background=True)
    failed = wait_status(client, queued.id, TERMINAL)
    assert failed.status == "failed" and failed.error is not None
    events = raw_events(server, tenant, queued.id)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["error"]["code"] == failed.error.code
    with pytest.raises(BadRequestError):
        client.responses.create(model=sim.config.model, input="x", previous_response_id=failed.id)


def test_background_turn_in_a_conversation(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("noted"))
    conversation = client.conversations.create(items=[{"role": "user", "content": "before"}])
    queued = client.responses.create(
        model=sim.config.model,
        input="in the background",
        conversation=conversation.id,
        background=True,
    )
    done = wait_status(client, queued.id, TERMINAL)
    assert done.status == "completed"
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [i.type for i in items] == ["message", "message", "message"]
    assert items[-1].id == done.output[0].id


def test_background_requests_are_validated_when_made(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    with pytest.raises(NotFoundError) as missing:
        client.responses.create(
            model=sim.config.model, input="x", previous_response_id="resp_nope", background=True
        )
    assert missing.value.code == "previous_response_not_found"
    with pytest.raises(BadRequestError):
        client.responses.create(model=sim.config.model, input="x", background=True, store=False)
    assert sim.calls("/v1/responses") == 0


def test_queue_depth_is_a_metric(server: RunningServer) -> None:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert "agentic_background_queue_depth " in text


def update_job(db_url: str, response_id: str, **values: Any) -> None:
    async def run() -> None:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                await session.execute(
                    update(BackgroundJob)
                    .where(BackgroundJob.response_id == response_id)
                    .values(**values)
                )
        finally:
            await db.close()

    asyncio.run(run())


def _enqueue_without_workers(
    db_url: str, sim: SimServer, folder: Path, count: int
) -> tuple[TenantKeys, list[str]]:
    tenant = create_tenant(db_url)
    with running_server(db_url, sim, folder, background_workers=0) as api:
        client = api.client(tenant, timeout=20)
        ids = [
            client.responses.create(model=sim.config.model, input=f"job {n}", background=True).id
            for n in range(count)
        ]
    return tenant, ids


def test_jobs_left_by_a_dead_worker_are_recovered_by_the_rule(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    tenant, (unstarted, started, exhausted) = _enqueue_without_workers(fresh_db, sim, tmp_path, 3)
    # Play three workers that died: before starting, after starting (with one event
    # stored), and the last of three that all died before starting.
    past = datetime(2000, 1, 1, tzinfo=UTC)
    dead = [(unstarted, 1, None), (started, 1, past), (exhausted, 3, None)]
    for response_id, attempts, started_at in dead:
        update_job(
            fresh_db,
            response_id,
            status="running",
            claim_token=f"gone-{response_id[-6:]}",
            attempts=attempts,
            lease_expires_at=past,
            started_at=started_at,
        )
    execute(fresh_db, "UPDATE responses SET status = 'in_progress' WHERE id = :id", id=started)
    # The event a started worker stores first: the response's snapshot.
    body = scalar(fresh_db, "SELECT body FROM responses WHERE id = :id", id=started)
    snapshot = {**(json.loads(body) if isinstance(body, str) else body), "status": "in_progress"}
    created = {"type": "response.created", "response": snapshot, "sequence_number": 0}
    execute(
        fresh_db,
        "INSERT INTO response_events (response_id, sequence_number, data) VALUES (:id, 0, :d)",
        id=started,
        d=json.dumps(created),
    )
    sim.push(Reply("ran once"))
    with running_server(fresh_db, sim, tmp_path, background_workers=1) as server:
        client = server.client(tenant, timeout=20)
        assert wait_status(client, unstarted, TERMINAL).output_text == "ran once"
        lost = wait_status(client, started, TERMINAL)
        # Response.error takes OpenAI's codes; the stream's error event says why.
        assert lost.status == "failed" and lost.error.code == "server_error"
        assert wait_status(client, exhausted, TERMINAL).error.code == "server_error"
        events = raw_events(server, tenant, started)
        exhausted_events = raw_events(server, tenant, exhausted)
    assert [e["type"] for e in events] == ["response.created", "error", "response.failed"]
    assert events[1]["code"] == "worker_lost"
    assert [e["code"] for e in exhausted_events if e["type"] == "error"] == ["worker_lost"]
    assert sim.calls("/v1/responses") == 1
    assert "job 0" in upstream_inputs(sim)[0]
    assert rows(fresh_db, "SELECT * FROM background_jobs") == []


def test_shutdown_fails_a_job_it_cannot_finish(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    tenant = create_tenant(fresh_db)
    sim.push(Hang())
    with running_server(
        fresh_db, sim, tmp_path, background_workers=1, shutdown_grace_seconds=0.5
    ) as server:
        client = server.client(tenant, timeout=20)
        queued = client.responses.create(model=sim.config.model, input="x", background=True)
        wait_status(client, queued.id, {"in_progress"})
    assert sim.wait_aborted(1)
    assert scalar(fresh_db, "SELECT status FROM responses WHERE id = :id", id=queued.id) == (
        "failed"
    )
    error = scalar(fresh_db, "SELECT error FROM responses WHERE id = :id", id=queued.id)
    assert "server_error" in str(error) and "shut down" in str(error)
    stored = scalar(
        fresh_db,
        "SELECT data FROM response_events WHERE response_id = :id AND data LIKE '%\"error\"%'"
        " ORDER BY sequence_number LIMIT 1",
        id=queued.id,
    )
    assert '"code":"worker_lost"' in str(stored)


def test_deleting_a_running_job_stops_it(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    sim.push(Hang(after_events=3))
    queued = client.responses.create(model=sim.config.model, input="forever", background=True)
    wait_status(client, queued.id, {"in_progress"})
    assert sim.wait_for(lambda: sim.calls("/v1/responses") == 1)
    client.responses.delete(queued.id)
    assert sim.wait_aborted(1)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(queued.id)
    assert (
        scalar(
            server.db_url,
            "SELECT status FROM responses WHERE id = :id",
            id=queued.id,
        )
        == "cancelled"
    )
