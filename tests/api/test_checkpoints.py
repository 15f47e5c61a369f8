"""Fail-closed rehydration and client disconnects: stored history is proven before it is
replayed, and a turn is either wholly stored or not at all."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from openai import InternalServerError, OpenAI
from sqlalchemy import text

from agentic_api.storage.database import Database
from tests.conftest import RunningServer, app_server
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


@pytest.fixture(scope="module")
def reading_server(
    backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """A server that keeps no verified histories: every continuation reads its items."""
    with app_server(
        backend, db_url, sim.url, tmp_path_factory.mktemp("reading"), history_memo_mb=0
    ) as running:
        yield running


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupted_history_is_refused_and_nothing_goes_upstream(
    reading_server: RunningServer, tenant: TenantKeys, sim: SimServer, corruption: str
) -> None:
    server, client = reading_server, reading_server.client(tenant, timeout=20)
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


def test_a_history_kept_in_process_is_replayed_as_committed_and_storage_still_verified(
    server: RunningServer,
    reading_server: RunningServer,
    client: OpenAI,
    tenant: TenantKeys,
    sim: SimServer,
) -> None:
    sim.push(Reply("the answer"))
    first = client.responses.create(model=sim.config.model, input="first question")
    second = client.responses.create(
        model=sim.config.model, input="second", previous_response_id=first.id
    )
    sent_for_second = sim.requests("/v1/responses")[-1].json["input"]
    hits_before = history_cache_hits(server)
    execute(server.db_url, CORRUPTIONS["altered"], rid=first.id)
    # This server committed `second` moments ago and kept its history: it continues
    # from the bytes the model saw (not the altered rows) without reading them.
    third = client.responses.create(
        model=sim.config.model, input="third", previous_response_id=second.id
    )
    sent_for_third = sim.requests("/v1/responses")[-1].json["input"]
    assert third.status == "completed"
    assert history_cache_hits(server) == hits_before + 1
    assert sent_for_third[: len(sent_for_second)] == sent_for_second
    assert "fIrst" not in orjson.dumps(sent_for_third).decode()
    # Any process that has to read the items (here: one that keeps nothing) refuses.
    calls_before = sim.calls("/v1/responses")
    with pytest.raises(InternalServerError) as error:
        reading_server.client(tenant, timeout=20).responses.create(
            model=sim.config.model, input="third", previous_response_id=second.id
        )
    assert error.value.code == "checkpoint_invalid"
    assert sim.calls("/v1/responses") == calls_before


def history_cache_hits(server: RunningServer) -> float:
    return history_lookups(server, "hit")


def history_lookups(server: RunningServer, result: str) -> float:
    metrics = httpx.get(f"{server.url}/metrics").text
    for line in metrics.splitlines():
        if line.startswith(f'agentic_history_cache_lookups_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture(scope="module")
def other_worker(
    backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """A second server over the same database, as a second `serve` worker (or replica) is:
    what it commits, the first has never seen."""
    with app_server(backend, db_url, sim.url, tmp_path_factory.mktemp("other")) as running:
        yield running


@dataclass(frozen=True)
class TwoWorkers:
    """One tenant's clients of two servers over one database (``here`` is the one whose
    kept histories the tests look at)."""

    here: OpenAI
    there: OpenAI
    model: str

    def turn(self, client: OpenAI, text: str, previous: Any = None) -> Any:
        after = {"previous_response_id": previous.id} if previous is not None else {}
        return client.responses.create(model=self.model, input=text, **after)


@pytest.fixture
def workers(
    server: RunningServer, other_worker: RunningServer, tenant: TenantKeys, sim: SimServer
) -> TwoWorkers:
    here, there = server.client(tenant, timeout=20), other_worker.client(tenant, timeout=20)
    return TwoWorkers(here, there, sim.config.model)


def test_a_parent_another_worker_committed_is_read_after_the_ancestor_kept_here(
    server: RunningServer, workers: TwoWorkers, sim: SimServer
) -> None:
    here, there = workers.here, workers.there
    second = workers.turn(here, "two", workers.turn(here, "one"))
    sim.push(Reply("said over there"))
    third = workers.turn(there, "three", second)
    sent_for_third = sim.requests("/v1/responses")[-1].json["input"]
    extended, misses = history_lookups(server, "extended"), history_lookups(server, "miss")
    # `third` is not kept here, `second` is: only `third`'s items are read, and they are
    # verified by extending `second`'s digest.
    fourth = workers.turn(here, "four", third)
    sent_for_fourth = sim.requests("/v1/responses")[-1].json["input"]
    assert fourth.status == "completed"
    assert history_lookups(server, "extended") == extended + 1
    assert history_lookups(server, "miss") == misses + 1
    assert sent_for_fourth[: len(sent_for_third)] == sent_for_third
    assert "said over there" in orjson.dumps(sent_for_fourth[len(sent_for_third)]).decode()
    assert len(sent_for_fourth) == len(sent_for_third) + 2


def test_turns_after_the_kept_ancestor_are_still_verified(
    server: RunningServer, workers: TwoWorkers, sim: SimServer
) -> None:
    here, there = workers.here, workers.there
    second = workers.turn(here, "two", workers.turn(here, "first question"))
    third = workers.turn(there, "first again", second)
    execute(server.db_url, CORRUPTIONS["altered"], rid=third.id)
    calls_before = sim.calls("/v1/responses")
    with pytest.raises(InternalServerError) as error:
        workers.turn(here, "four", third)
    assert error.value.code == "checkpoint_invalid"
    assert third.id in error.value.message
    assert sim.calls("/v1/responses") == calls_before


def test_a_branch_the_kept_turn_is_not_on_is_read_whole(
    server: RunningServer, workers: TwoWorkers, sim: SimServer
) -> None:
    here, there = workers.here, workers.there
    first = workers.turn(here, "one")
    # The session's latest turn kept here: a sibling of the branch continued below.
    workers.turn(here, "two", first)
    branch = workers.turn(there, "two b", first)
    sim.push(Reply("on the branch"))
    tip = workers.turn(there, "three b", branch)
    sent_for_tip = sim.requests("/v1/responses")[-1].json["input"]
    extended = history_lookups(server, "extended")
    after = workers.turn(here, "four b", tip)
    sent = sim.requests("/v1/responses")[-1].json["input"]
    assert after.status == "completed"
    assert history_lookups(server, "extended") == extended
    assert sent[: len(sent_for_tip)] == sent_for_tip
    assert "on the branch" in orjson.dumps(sent[len(sent_for_tip)]).decode()


@pytest.mark.slow  # waits out a disconnect, a drain or a full lane: seconds
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
