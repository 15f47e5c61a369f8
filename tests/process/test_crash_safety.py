"""Crash safety with real processes: SIGKILL mid-turn and mid-job (a multi-agent tree's
too), several processes on one queue, retries across a crash, cancel across processes
(SQLite and PostgreSQL)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from openai import BadRequestError, NotFoundError, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.support.clients import openai_client
from tests.support.processes import Process, process_env
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Call, Hang, Reply, SimServer, ToolCalls
from tests.upstream_sim.state import agent_of

# Each waits on real processes starting, dying and leases running out: seconds apiece.
pytestmark = pytest.mark.slow

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}
LEASE_SECONDS = 2


@pytest.fixture
def env(fresh_db: str, sim: SimServer, tmp_path: Path) -> dict[str, str]:
    return process_env(
        fresh_db,
        sim.url,
        tmp_path / "data",
        lease_seconds=LEASE_SECONDS,
        background_poll_seconds=0.2,
    )


@pytest.fixture
def tenant(fresh_db: str) -> TenantKeys:
    return create_tenant(fresh_db)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def client_of(process: Process, tenant: TenantKeys) -> OpenAI:
    return openai_client(f"{process.url}/v1", tenant.api_key, timeout=20)


def wait_status(client: OpenAI, response_id: str, wanted: set[str], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while (response := client.responses.retrieve(response_id)).status not in wanted:
        assert time.monotonic() < deadline, f"still {response.status}"
        time.sleep(0.05)
    return response


def stream_until_killed(
    process: Process,
    tenant: TenantKeys,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> str:
    """Starts a streaming turn, kills the server after a few deltas; the response id."""
    response_id = ""
    deltas = 0
    seen: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{process.url}/v1/responses",
        json={**body, "stream": True},
        headers={"authorization": f"Bearer {tenant.api_key}", **(headers or {})},
        timeout=20,
    ) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = orjson.loads(line[6:])
            seen.append(event)
            response_id = response_id or event["response"]["id"]
            deltas += event["type"] == "response.output_text.delta"
            if deltas == 5:
                process.kill()
                break
        status = response.status_code
    # When the turn ends first, say how: the events (a failed turn carries its error) and
    # the server's own log.
    assert deltas == 5, (
        f"the turn ended before it could be killed: HTTP {status}, "
        f"{[event['type'] for event in seen]}, last {seen[-1:]}\n{process.output()[-4000:]}"
    )
    return response_id


def sse(reply: httpx.Response) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: ")]


def events_of(process: Process, tenant: TenantKeys, response_id: str) -> list[dict[str, Any]]:
    reply = httpx.get(
        f"{process.url}/v1/responses/{response_id}",
        params={"stream": "true"},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    )
    return sse(reply)


def count(db_url: str, table: str, response_id: str) -> int:
    column = "id" if table == "responses" else "response_id"
    return int(scalar(db_url, f"SELECT count(*) FROM {table} WHERE {column} = :id", id=response_id))


def test_a_turn_killed_mid_stream_leaves_nothing_and_the_head_continues(
    env: dict[str, str],
    fresh_db: str,
    tenant: TenantKeys,
    sim: SimServer,
    processes: list[Process],
) -> None:
    model = sim.config.model
    server = Process.serve(env)
    processes.append(server)
    client = client_of(server, tenant)
    conversation = client.conversations.create()
    sim.push(Reply("the first answer"), Reply("word " * 300, event_delay=0.02))
    first = client.responses.create(
        model=model, input="first question", conversation=conversation.id
    )
    killed = stream_until_killed(
        server, tenant, {"model": model, "input": "doomed", "conversation": conversation.id}
    )

    for table in ("responses", "response_items", "response_events"):
        assert count(fresh_db, table, killed) == 0, table
    restarted = Process.serve(env)
    processes.append(restarted)
    client = client_of(restarted, tenant)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(killed)
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [i.id for i in items][-1] == first.output[0].id and len(items) == 2

    sim.push(Reply("still here"), Reply("forked"))
    after = client.responses.create(model=model, input="again", conversation=conversation.id)
    assert after.output_text == "still here"
    sent = sim.last("/v1/responses").json["input"]
    assert [item["id"] for item in sent[:2]] == [i.id for i in items]
    forked = client.responses.create(model=model, input="fork", previous_response_id=first.id)
    assert forked.output_text == "forked"


def test_a_background_job_killed_mid_run_ends_failed_after_its_lease(
    env: dict[str, str],
    fresh_db: str,
    tenant: TenantKeys,
    sim: SimServer,
    processes: list[Process],
) -> None:
    server = Process.serve(env)
    processes.append(server)
    client = client_of(server, tenant)
    sim.push(Reply("slow " * 300, event_delay=0.05))
    queued = client.responses.create(model=sim.config.model, input="job", background=True)
    deadline = time.monotonic() + 15
    while count(fresh_db, "response_events", queued.id) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    server.kill()
    assert scalar(fresh_db, "SELECT status FROM responses WHERE id = :id", id=queued.id) == (
        "in_progress"
    )

    restarted = Process.serve(env)
    processes.append(restarted)
    client = client_of(restarted, tenant)
    failed = wait_status(client, queued.id, TERMINAL)
    assert failed.status == "failed" and failed.error.code == "server_error"
    events = events_of(restarted, tenant, queued.id)
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "worker_lost"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    with pytest.raises(BadRequestError):
        client.responses.create(
            model=sim.config.model, input="more", previous_response_id=queued.id
        )
    assert sim.calls("/v1/responses") == 1


def metric_total(process: Process, name: str, **labels: str) -> float:
    """The sum of a metric's samples on a process's /metrics (those with ``labels``)."""
    text = httpx.get(f"{process.url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def completed_turns(process: Process) -> float:
    return metric_total(process, "agentic_turns_total", status="completed")


def test_processes_share_the_queue_and_run_each_job_once(
    env: dict[str, str],
    tenant: TenantKeys,
    sim: SimServer,
    processes: list[Process],
) -> None:
    jobs = 12
    one = Process.serve({**env, "AGENTIC_BACKGROUND_WORKERS": "1"})
    two = Process.serve({**env, "AGENTIC_BACKGROUND_WORKERS": "1"})
    worker = Process.worker(env, workers=2)
    processes.extend([one, two, worker])
    sim.push(*[Reply(f"answer {n}", delay=0.3) for n in range(jobs)])
    clients = [client_of(one, tenant), client_of(two, tenant)]
    ids = [
        clients[n % 2]
        .responses.create(model=sim.config.model, input=f"job-{n}-input", background=True)
        .id
        for n in range(jobs)
    ]
    for response_id in ids:
        assert wait_status(clients[0], response_id, TERMINAL).status == "completed"
    bodies = [r.body.decode() for r in sim.requests("/v1/responses")]
    assert len(bodies) == jobs
    for n in range(jobs):
        assert sum(f"job-{n}-input" in body for body in bodies) == 1
    # The worker process (which has no metrics port) ran some of them.
    assert completed_turns(one) + completed_turns(two) < jobs


def statements(process: Process) -> float:
    return metric_total(process, "agentic_db_statements_total")


def test_an_idle_process_skips_its_looks_yet_finds_a_job_enqueued_elsewhere(
    env: dict[str, str],
    backend: str,
    tenant: TenantKeys,
    sim: SimServer,
    processes: list[Process],
) -> None:
    """On SQLite an idle worker and sweep read the database's change mark and skip their
    looks while nobody commits (before: a read transaction at every poll and sweep); a job
    enqueued by another process is still found by the next poll. On PostgreSQL, with no
    mark, they keep looking."""
    worker = Process.serve({**env, "AGENTIC_BACKGROUND_WORKERS": "1"})
    processes.append(worker)
    time.sleep(2.0)  # its first looks, sweep and prune
    before = statements(worker)
    time.sleep(3.0)  # polls (0.2 s, growing to 1.6 s) and 3 sweeps (1 s)
    idle = statements(worker) - before
    if backend == "sqlite":
        assert idle == 0
    else:
        assert idle >= 3
    api = Process.serve({**env, "AGENTIC_BACKGROUND_WORKERS": "0"})
    processes.append(api)
    sim.push(Reply("found"))
    client = client_of(api, tenant)
    queued = client.responses.create(model=sim.config.model, input="elsewhere", background=True)
    # Well inside the mark's own safety net (a real look at least once a minute).
    assert wait_status(client, queued.id, TERMINAL, timeout=20).status == "completed"
    assert completed_turns(worker) == 1


def test_retries_across_a_crash_run_the_model_once_more_at_most(
    env: dict[str, str],
    tenant: TenantKeys,
    sim: SimServer,
    processes: list[Process],
) -> None:
    server = Process.serve(env)
    processes.append(server)
    key = {"idempotency-key": f"key-{uuid.uuid4().hex}"}
    request = {"model": sim.config.model, "input": "exactly once"}
    sim.push(Reply("word " * 300, event_delay=0.02), Reply("the retry's answer"))
    stream_until_killed(server, tenant, request, key)
    restarted = Process.serve(env)
    processes.append(restarted)

    def retry() -> httpx.Response:
        return httpx.post(
            f"{restarted.url}/v1/responses",
            json={**request, "stream": True},
            headers={"authorization": f"Bearer {tenant.api_key}", **key},
            timeout=20,
        )

    # The dead process's claim blocks the key until its lease runs out, then the retry runs.
    deadline = time.monotonic() + 3 * LEASE_SECONDS + 5
    while (answer := retry()).status_code == 409:
        assert answer.json()["error"]["code"] == "idempotency_key_in_progress"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert answer.status_code == 200
    events = sse(answer)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "the retry's answer"
    for _ in range(3):
        assert sse(retry()) == events
    assert sim.calls("/v1/responses") == 2


def test_a_cancel_through_one_process_stops_the_job_in_another(
    env: dict[str, str],
    tenant: TenantKeys,
    sim: SimServer,
    processes: list[Process],
) -> None:
    api = Process.serve({**env, "AGENTIC_BACKGROUND_WORKERS": "0"})
    worker = Process.worker(env, workers=1)
    processes.extend([api, worker])
    client = client_of(api, tenant)
    sim.push(Hang(after_events=4))
    queued = client.responses.create(model=sim.config.model, input="forever", background=True)
    wait_status(client, queued.id, {"in_progress"})
    assert sim.wait_for(lambda: sim.calls("/v1/responses") == 1)
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert sim.wait_aborted(1, timeout=5)
    time.sleep(0.5)
    events = events_of(api, tenant, queued.id)
    assert events[-1]["type"] == "response.cancelled"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert client.responses.retrieve(queued.id).status == "cancelled"
    worker.popen.terminate()
    assert worker.popen.wait(timeout=20) == 0


MULTI_AGENT_BETAS: Any = ["responses_multi_agent=v1"]


def test_a_tree_killed_mid_run_fails_after_its_lease(
    fresh_db: str, sim: SimServer, tmp_path: Path, processes: list[Process]
) -> None:
    env = process_env(
        fresh_db,
        sim.url,
        tmp_path / "data",
        lease_seconds=LEASE_SECONDS,
        background_poll_seconds=0.2,
        router_agentic_context=True,
    )
    tenant: TenantKeys = create_tenant(fresh_db)
    server = Process.serve(env)
    processes.append(server)
    client = client_of(server, tenant)
    sim.push_for(
        "/root",
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Work long."})]),
        ToolCalls([Call("wait_agent", {})]),
    )
    sim.push_for("/root/alpha", Hang())
    queued = client.beta.responses.create(
        model=sim.config.model,
        input="Delegate.",
        background=True,
        multi_agent={"enabled": True},
        betas=MULTI_AGENT_BETAS,
    )
    assert sim.wait_for(
        lambda: any(agent_of(r.json) == "/root/alpha" for r in sim.requests("/v1/responses")),
        timeout=20,
    )
    server.kill()
    sent = len(sim.requests("/v1/responses"))
    assert scalar(fresh_db, "SELECT status FROM responses WHERE id = :id", id=queued.id) == (
        "in_progress"
    )

    restarted = Process.serve(env)
    processes.append(restarted)
    client = client_of(restarted, tenant)
    deadline = time.monotonic() + 20
    while (
        found := client.beta.responses.retrieve(queued.id, betas=MULTI_AGENT_BETAS)
    ).status not in TERMINAL:
        assert time.monotonic() < deadline, f"still {found.status}"
        time.sleep(0.05)
    assert found.status == "failed"
    # Its stored events, on the beta path (they hold the beta's items).
    events = sse(
        httpx.get(
            f"{restarted.url}/v1/responses/{queued.id}",
            params={"stream": "true", "beta": "true"},
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=20,
        )
    )
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "worker_lost"
    # Nothing of the tree is continuable, and no agent ran again after the crash.
    with pytest.raises(BadRequestError):
        client.beta.responses.create(
            model=sim.config.model,
            input="more",
            previous_response_id=queued.id,
            multi_agent={"enabled": True},
            betas=MULTI_AGENT_BETAS,
        )
    assert len(sim.requests("/v1/responses")) == sent
