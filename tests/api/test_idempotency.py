"""Idempotency-Key on POST /v1/responses and conversation item appends: a retried request
gets the first one's outcome and the model runs once (on SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from openai import OpenAI

from agentic_api.idempotency import request_hash
from agentic_api.storage.database import Database
from agentic_api.storage.idempotency import IdempotencyRepository
from agentic_api.storage.models import IdempotencyKey
from tests.conftest import RunningServer
from tests.support.sql import execute, scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Fail, Reply, SimServer, StreamError


def post(
    server: RunningServer,
    tenant: TenantKeys,
    path: str,
    body: dict[str, Any],
    key: str | None,
) -> httpx.Response:
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    if key is not None:
        headers["idempotency-key"] = key
    return httpx.post(f"{server.url}{path}", json=body, headers=headers, timeout=20)


def new_key() -> str:
    return f"key-{uuid.uuid4().hex}"


def body(sim: SimServer, **extra: Any) -> dict[str, Any]:
    return {"model": sim.config.model, "input": "count me once", **extra}


def test_a_retry_gets_the_stored_response_and_the_model_runs_once(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("only once"))
    key = new_key()
    first = post(server, tenant, "/v1/responses", body(sim), key)
    assert first.status_code == 200
    for _ in range(3):
        again = post(server, tenant, "/v1/responses", body(sim), key)
        assert again.status_code == 200
        assert again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"
    assert sim.calls("/v1/responses") == 1
    assert "idempotent-replayed" not in first.headers


def test_the_sdk_can_send_the_key(client: OpenAI, sim: SimServer) -> None:
    key = new_key()
    made = [
        client.responses.create(
            model=sim.config.model, input="via sdk", extra_headers={"Idempotency-Key": key}
        )
        for _ in range(2)
    ]
    assert made[0].model_dump() == made[1].model_dump()
    assert sim.calls("/v1/responses") == 1


def sse_data(response: httpx.Response) -> list[dict[str, Any]]:
    return [
        orjson.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]


def test_a_retried_stream_replays_the_stored_events(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("streamed once"))
    key = new_key()
    first = post(server, tenant, "/v1/responses", body(sim, stream=True), key)
    again = post(server, tenant, "/v1/responses", body(sim, stream=True), key)
    assert sse_data(first) == sse_data(again)
    assert sse_data(again)[-1]["type"] == "response.completed"
    assert again.headers["content-type"].startswith("text/event-stream")
    assert sim.calls("/v1/responses") == 1


def test_a_stored_mid_stream_failure_is_replayed_too(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(StreamError(after_events=2))
    key = new_key()
    first = post(server, tenant, "/v1/responses", body(sim, stream=True), key)
    assert sse_data(first)[-1]["type"] == "response.failed"
    again = post(server, tenant, "/v1/responses", body(sim, stream=True), key)
    assert sse_data(again) == sse_data(first)
    assert sim.calls("/v1/responses") == 1


def test_the_same_key_with_another_request_is_refused(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    key = new_key()
    assert post(server, tenant, "/v1/responses", body(sim), key).status_code == 200
    other = post(server, tenant, "/v1/responses", body(sim, input="something else"), key)
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    streamed = post(server, tenant, "/v1/responses", body(sim, stream=True), key)
    assert streamed.status_code == 422
    assert sim.calls("/v1/responses") == 1


def test_the_same_key_while_the_first_runs_is_a_conflict(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("slow", delay=1.0))
    key = new_key()
    results: list[httpx.Response] = []
    first = threading.Thread(
        target=lambda: results.append(post(server, tenant, "/v1/responses", body(sim), key))
    )
    first.start()
    assert sim.wait_for(lambda: sim.calls("/v1/responses") == 1)
    racing = post(server, tenant, "/v1/responses", body(sim), key)
    assert racing.status_code == 409
    assert racing.json()["error"]["code"] == "idempotency_key_in_progress"
    first.join(timeout=20)
    assert results[0].status_code == 200
    assert post(server, tenant, "/v1/responses", body(sim), key).json() == results[0].json()
    assert sim.calls("/v1/responses") == 1


def test_a_request_that_stored_nothing_releases_the_key(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    key = new_key()
    # Refused upstream before anything was stored: the retry runs.
    sim.push(Fail(status=400, message="try again"), Reply("second try"))
    assert post(server, tenant, "/v1/responses", body(sim), key).status_code == 400
    retried = post(server, tenant, "/v1/responses", body(sim), key)
    assert retried.status_code == 200 and retried.json()["output"][0]["content"][0]["text"] == (
        "second try"
    )
    assert sim.calls("/v1/responses") == 2
    # Refused by validation (before and after the key is claimed): nothing is kept.
    key = new_key()
    assert post(server, tenant, "/v1/responses", {"input": "no model"}, key).status_code == 400
    missing = body(sim, previous_response_id="resp_missing")
    for _ in range(2):
        refused = post(server, tenant, "/v1/responses", missing, key)
        assert refused.status_code == 404
    # Released, so the key is unused: even another request may take it.
    assert post(server, tenant, "/v1/responses", body(sim), key).status_code == 200
    # A refused stream.
    key = new_key()
    sim.push(Fail(status=400), Reply("ok"))
    assert post(server, tenant, "/v1/responses", body(sim, stream=True), key).status_code == 400
    assert post(server, tenant, "/v1/responses", body(sim, stream=True), key).status_code == 200


def test_bad_keys_and_unstored_requests_are_refused(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    long_key = post(server, tenant, "/v1/responses", body(sim), "k" * 256)
    assert long_key.status_code == 400
    assert long_key.json()["error"]["code"] == "invalid_idempotency_key"
    assert post(server, tenant, "/v1/responses", body(sim), "k" * 255).status_code == 200
    unstored = post(server, tenant, "/v1/responses", body(sim, store=False), new_key())
    assert unstored.status_code == 400
    assert unstored.json()["error"]["code"] == "idempotency_key_requires_store"
    assert sim.calls("/v1/responses") == 1


def test_keys_are_scoped_per_tenant_and_endpoint(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    key = new_key()
    other = create_tenant(server.db_url)
    mine = post(server, tenant, "/v1/responses", body(sim), key).json()
    theirs = post(server, other, "/v1/responses", body(sim), key).json()
    assert mine["id"] != theirs["id"]
    conversation = post(server, tenant, "/v1/conversations", {}, None).json()
    appended = post(
        server,
        tenant,
        f"/v1/conversations/{conversation['id']}/items",
        {"items": [{"role": "user", "content": "hi"}]},
        key,
    )
    assert appended.status_code == 200
    assert sim.calls("/v1/responses") == 2


def test_a_retried_item_append_appends_once(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    first_conversation = post(server, tenant, "/v1/conversations", {}, None).json()["id"]
    second_conversation = post(server, tenant, "/v1/conversations", {}, None).json()["id"]
    key = new_key()
    items = {"items": [{"role": "user", "content": "once"}, {"role": "user", "content": "twice"}]}
    path = f"/v1/conversations/{first_conversation}/items"
    first = post(server, tenant, path, items, key)
    again = post(server, tenant, path, items, key)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    listed = httpx.get(
        f"{server.url}{path}", headers={"authorization": f"Bearer {tenant.api_key}"}
    ).json()
    assert len(listed["data"]) == 2
    changed = post(server, tenant, path, {"items": [{"role": "user", "content": "x"}]}, key)
    assert changed.status_code == 422
    elsewhere = post(server, tenant, f"/v1/conversations/{second_conversation}/items", items, key)
    assert elsewhere.status_code == 422
    # A failed append (unknown conversation) keeps nothing: the key stays unused.
    key = new_key()
    assert post(server, tenant, "/v1/conversations/conv_nope/items", items, key).status_code == 404
    assert post(server, tenant, path, items, key).status_code == 200


def test_a_background_create_is_enqueued_once(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    key = new_key()
    queued = post(server, tenant, "/v1/responses", body(sim, background=True), key)
    again = post(server, tenant, "/v1/responses", body(sim, background=True), key)
    assert queued.status_code == 200 and again.json() == queued.json()
    assert queued.json()["status"] == "queued"
    assert sim.wait_for(lambda: sim.calls("/v1/responses") == 1)
    jobs = scalar(
        server.db_url,
        "SELECT count(*) FROM responses WHERE tenant_id = :t AND background",
        t=tenant.id,
    )
    assert jobs == 1


def _claim_row(
    server: RunningServer, tenant: TenantKeys, key: str, request: dict[str, Any], **values: Any
) -> None:
    now = datetime.now(UTC)

    async def run() -> None:
        db = Database.from_url(server.db_url, pool_size=1)
        try:
            async with db.write() as session:
                session.add(
                    IdempotencyKey(
                        tenant_id=tenant.id,
                        endpoint="responses",
                        key=key,
                        request_hash=request_hash(request),
                        created_at=now - timedelta(hours=1),
                        **values,
                    )
                )
        finally:
            await db.close()

    asyncio.run(run())


def test_a_dead_claim_expires_and_an_expired_key_is_ignored(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    now = datetime.now(UTC)
    request = body(sim)
    # A claim held by a live request: a conflict. One whose lease ran out (its process
    # died): taken over, and the request runs.
    live, dead = new_key(), new_key()
    _claim_row(
        server,
        tenant,
        live,
        request,
        status="in_progress",
        owner_token="other",
        lease_expires_at=now + timedelta(minutes=5),
        expires_at=now + timedelta(days=1),
    )
    _claim_row(
        server,
        tenant,
        dead,
        request,
        status="in_progress",
        owner_token="dead",
        lease_expires_at=now - timedelta(seconds=1),
        expires_at=now + timedelta(days=1),
    )
    assert post(server, tenant, "/v1/responses", request, live).status_code == 409
    taken = post(server, tenant, "/v1/responses", request, dead)
    assert taken.status_code == 200
    assert post(server, tenant, "/v1/responses", request, dead).json() == taken.json()
    assert sim.calls("/v1/responses") == 1
    # Past its time to live a key counts as unused, even for another request.
    execute(
        server.db_url, "UPDATE idempotency_keys SET expires_at = created_at WHERE key = :k", k=dead
    )
    other = post(server, tenant, "/v1/responses", body(sim, input="new"), dead)
    assert other.status_code == 200 and other.json()["id"] != taken.json()["id"]
    assert sim.calls("/v1/responses") == 2


def test_expired_keys_are_pruned(server: RunningServer, tenant: TenantKeys, sim: SimServer) -> None:
    now = datetime.now(UTC)
    old, running, fresh = new_key(), new_key(), new_key()
    past = now - timedelta(days=2)
    _claim_row(server, tenant, old, {}, status="completed", expires_at=past)
    _claim_row(
        server,
        tenant,
        running,
        {},
        status="in_progress",
        owner_token="t",
        lease_expires_at=now + timedelta(minutes=1),
        expires_at=past,
    )
    _claim_row(server, tenant, fresh, {}, status="completed", expires_at=now + timedelta(days=1))

    async def prune() -> None:
        db = Database.from_url(server.db_url, pool_size=1)
        try:
            async with db.write() as session:
                await IdempotencyRepository(session).prune(now)
        finally:
            await db.close()

    asyncio.run(prune())
    left = scalar(
        server.db_url,
        "SELECT count(*) FROM idempotency_keys WHERE key IN (:a, :b, :c)",
        a=old,
        b=running,
        c=fresh,
    )
    assert left == 2
    assert scalar(server.db_url, "SELECT count(*) FROM idempotency_keys WHERE key = :k", k=old) == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_lost_conversation_race_is_the_keys_outcome(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, stream: bool
) -> None:
    conversation = post(server, tenant, "/v1/conversations", {}, None).json()["id"]
    sim.push(Reply("slow", delay=0.5), Reply("again"))
    key = new_key()
    request = body(sim, conversation=conversation, stream=stream)
    results: list[httpx.Response] = []
    turn = threading.Thread(
        target=lambda: results.append(post(server, tenant, "/v1/responses", request, key))
    )
    turn.start()
    assert sim.wait_for(lambda: sim.calls("/v1/responses") == 1)
    # An append lands while the turn runs: the turn loses its commit and stores nothing.
    post(
        server,
        tenant,
        f"/v1/conversations/{conversation}/items",
        {"items": [{"role": "user", "content": "meanwhile"}]},
        None,
    )
    turn.join(timeout=20)
    lost = results[0]
    if stream:
        assert sse_data(lost)[-1]["code"] == "conversation_conflict"
    else:
        assert lost.status_code == 409
    # The model ran once; the retry answers the refusal instead of running it again.
    retried = post(server, tenant, "/v1/responses", request, key)
    assert retried.status_code == 409, retried.text
    assert retried.json()["error"]["code"] == "conversation_conflict"
    assert retried.headers.get("idempotent-replayed") == "true"
    assert sim.calls("/v1/responses") == 1
