"""Fail-closed rehydration and client disconnects: stored history is proven before it is
replayed, and a turn is either wholly stored or not at all."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from openai import InternalServerError, OpenAI
from sqlalchemy import text

from agentic_api.storage.database import Database
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import Reply, SimServer


def execute(db_url: str, sql: str, **params: object) -> None:
    async def run() -> None:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                for statement in sql.split(";"):
                    await session.execute(text(statement), params)
        finally:
            await db.close()

    asyncio.run(run())


def scalar(db_url: str, sql: str, **params: object) -> object:
    async def run() -> object:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.read() as session:
                return (await session.execute(text(sql), params)).scalar()
        finally:
            await db.close()

    return asyncio.run(run())


CORRUPTIONS = {
    "altered": "UPDATE response_items SET data = replace(data, 'first', 'fIrst') "
    "WHERE response_id = :rid AND role = 'input'",
    "undecodable": "UPDATE response_items SET data = '{not json' "
    "WHERE response_id = :rid AND role = 'output'",
    "missing": "DELETE FROM response_items WHERE response_id = :rid AND role = 'output'",
    "reordered": "UPDATE response_items SET position = position + 10 WHERE response_id = :rid;"
    "UPDATE response_items SET position = 11 - position WHERE response_id = :rid",
    "unknown type": "UPDATE response_items SET type = 'mystery' "
    "WHERE response_id = :rid AND role = 'output'",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupted_history_is_refused_and_nothing_goes_upstream(
    server: RunningServer, client: OpenAI, sim: SimServer, corruption: str
) -> None:
    sim.push(Reply("the answer"))
    first = client.responses.create(model=sim.config.model, input="first question")
    second = client.responses.create(
        model=sim.config.model, input="second", previous_response_id=first.id
    )
    execute(server.db_url, CORRUPTIONS[corruption], rid=first.id)
    calls_before = sim.calls("/v1/responses")
    with pytest.raises(InternalServerError) as error:
        client.responses.create(
            model=sim.config.model, input="third", previous_response_id=second.id
        )
    assert error.value.code == "checkpoint_invalid"
    assert second.id in error.value.message
    assert sim.calls("/v1/responses") == calls_before


def test_disconnecting_stream_client_still_commits_the_turn(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("slow answer " * 10, event_delay=0.05))
    with httpx.stream(
        "POST",
        f"{server.url}/v1/responses",
        json={"model": sim.config.model, "input": "x", "stream": True},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    ) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
    response_id = first.split('"id":"', 1)[1].split('"', 1)[0]
    # The client is gone; the turn finishes on its own and is stored whole.
    deadline = time.monotonic() + 15
    status = None
    while time.monotonic() < deadline:
        status = scalar(
            server.db_url, "SELECT status FROM responses WHERE id = :id", id=response_id
        )
        if status is not None:
            break
        time.sleep(0.1)
    assert status == "completed"
    outputs = scalar(
        server.db_url,
        "SELECT count(*) FROM response_items WHERE response_id = :id AND role = 'output'",
        id=response_id,
    )
    assert outputs == 1
    assert sim.last("/v1/responses").aborted is False


def test_chain_stays_verifiable_across_a_salt_rotation(
    server: RunningServer, client: OpenAI, tenant: TenantKeys, sim: SimServer
) -> None:
    from tests.support.tenants import create_admin_key

    first = client.responses.create(model=sim.config.model, input="one")
    second = client.responses.create(
        model=sim.config.model, input="two", previous_response_id=first.id
    )
    admin = create_admin_key(server.db_url)
    rotated = httpx.post(
        f"{server.url}/admin/v1/tenants/{tenant.id}/rotate_salt",
        headers={"authorization": f"Bearer {admin}"},
    )
    assert rotated.status_code == 200, rotated.text
    salts = [sim.last("/v1/responses").json["cache_salt"]]
    # The digest of turn 3 is recomputed under the new epoch; turn 4 extends it.
    third = client.responses.create(
        model=sim.config.model, input="three", previous_response_id=second.id
    )
    salts.append(sim.last("/v1/responses").json["cache_salt"])
    fourth = client.responses.create(
        model=sim.config.model, input="four", previous_response_id=third.id
    )
    fifth = client.responses.create(
        model=sim.config.model, input="five", previous_response_id=fourth.id
    )
    assert salts[0] != salts[1]
    assert fifth.status == "completed"
    assert len(sim.last("/v1/responses").json["input"]) == 9
