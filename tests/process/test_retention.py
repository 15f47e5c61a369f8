"""Retention (issue 38, item 13) in a real ``serve`` process: stored rows older than
``AGENTIC_RETENTION_DAYS`` are deleted by the background sweep, in small batches, on both
databases, without breaking a chain anything still continues; what went is counted in
``/metrics``. Rows are made through the SDKs, then backdated in the database (the
process's own clock is never touched)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from agentic_api.storage.database import Database
from agentic_api.storage.models import Conversation, MessageTurn, Response
from tests.support.clients import openai_client
from tests.support.processes import Process, process_env
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import SimServer

pytestmark = pytest.mark.slow

MODEL = "sim-model"
OLD = datetime(2020, 1, 1, tzinfo=UTC)
# Small batches, so an old chain takes several (one generation each at least).
BATCH_ROWS = 2


@contextlib.contextmanager
def serving(fresh_db: str, sim: SimServer, tmp_path: Path, **settings: object) -> Iterator[Process]:
    """``serve`` with ``settings`` (and Messages turns recorded), stopped afterwards."""
    env = process_env(
        fresh_db,
        sim.url,
        tmp_path / "data",
        background_poll_seconds=0.2,
        messages_record_turns="true",
        **settings,
    )
    process = Process.serve(env)
    try:
        yield process
    finally:
        process.stop()


RETENTION: dict[str, object] = {
    "retention_days": 1,
    "retention_interval_seconds": 0.3,
    "retention_batch_rows": BATCH_ROWS,
}


def pruned(process: Process, kind: str) -> float:
    text = httpx.get(f"{process.url}/metrics", timeout=20).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "agentic_retention_pruned_total" and sample.labels.get("kind") == kind
    )


def backdate(db_url: str, table: type[Any], column: str, **where: str) -> None:
    """Sets ``column`` to ``OLD`` through the column's own type (each database keeps
    times its own way)."""

    async def run() -> None:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                statement = update(table).values({column: OLD})
                for name, value in where.items():
                    statement = statement.where(getattr(table, name) == value)
                await session.execute(statement)
        finally:
            await db.close()

    asyncio.run(run())


def backdate_response(db_url: str, response_id: str) -> None:
    backdate(db_url, Response, "created_at", id=response_id)


def rows_of(db_url: str, table: str, response_id: str) -> int:
    count = scalar(db_url, f"SELECT count(*) FROM {table} WHERE response_id = :id", id=response_id)
    return int(count)


def exists(db_url: str, response_id: str) -> bool:
    return bool(scalar(db_url, "SELECT count(*) FROM responses WHERE id = :id", id=response_id))


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "retention did not get there in time"
        time.sleep(0.2)


def chain(client: OpenAI, length: int, *, stream: bool = False) -> list[str]:
    ids: list[str] = []
    for turn in range(length):
        previous = ids[-1] if ids else None
        if stream:
            with client.responses.stream(
                model=MODEL, input=f"turn {turn}", previous_response_id=previous
            ) as events:
                ids.append(events.get_final_response().id)
        else:
            ids.append(
                client.responses.create(
                    model=MODEL, input=f"turn {turn}", previous_response_id=previous
                ).id
            )
    return ids


@pytest.mark.parametrize("conversations", [False, True])
def test_old_rows_go_in_batches_and_live_chains_stay(
    conversations: bool,
    fresh_db: str,
    sim: SimServer,
    tmp_path: Path,
) -> None:
    with serving(
        fresh_db,
        sim,
        tmp_path,
        retention_conversations=str(conversations).lower(),
        **RETENTION,
    ) as process:
        check_retention(process, fresh_db, create_tenant(fresh_db), conversations=conversations)


def check_retention(
    process: Process, fresh_db: str, tenant: TenantKeys, *, conversations: bool
) -> None:
    client = openai_client(f"{process.url}/v1", tenant.api_key, timeout=30)
    # An old chain of three streamed turns: items, events and token ids stored for each.
    old_chain = chain(client, 3, stream=True)
    assert rows_of(fresh_db, "response_events", old_chain[-1]) > 0
    assert rows_of(fresh_db, "token_artifacts", old_chain[-1]) == 1
    # A chain whose root is old and whose tip is young: all of it stays.
    live_root, live_tip = chain(client, 2)
    young = client.responses.create(model=MODEL, input="young").id
    conversation = client.conversations.create(items=[{"role": "user", "content": "hello"}])
    in_conversation = client.responses.create(
        model=MODEL, input="in a conversation", conversation=conversation.id
    ).id
    with anthropic.Anthropic(
        base_url=process.url, api_key=tenant.api_key, max_retries=0, timeout=30
    ) as messages:
        messages.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert scalar(fresh_db, "SELECT count(*) FROM message_turns") == 1

    for response_id in [*old_chain, live_root, in_conversation]:
        backdate_response(fresh_db, response_id)
    backdate(fresh_db, Conversation, "updated_at")
    backdate(fresh_db, MessageTurn, "created_at")

    wait_for(lambda: pruned(process, "responses") >= len(old_chain))
    wait_for(lambda: scalar(fresh_db, "SELECT count(*) FROM message_turns") == 0)
    if conversations:
        wait_for(lambda: pruned(process, "conversations") == 1)

    for response_id in old_chain:
        assert not exists(fresh_db, response_id)
        for table in ("response_items", "response_events", "token_artifacts"):
            assert rows_of(fresh_db, table, response_id) == 0, table
    assert pruned(process, "responses") == len(old_chain)
    assert pruned(process, "message_turns") == 1
    # Nothing younger, and no ancestor of anything younger, went.
    for response_id in (live_root, live_tip, young):
        assert client.responses.retrieve(response_id).status == "completed"
    client.responses.create(model=MODEL, input="on", previous_response_id=live_tip)
    # Continuing a pruned response answers as for any unknown one.
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.create(model=MODEL, input="on", previous_response_id=old_chain[-1])
    assert isinstance(gone.value.body, dict)
    assert gone.value.body["code"] == "previous_response_not_found"

    if conversations:
        assert not exists(fresh_db, in_conversation)
        with pytest.raises(openai.NotFoundError):
            client.conversations.retrieve(conversation.id)
        assert scalar(fresh_db, "SELECT count(*) FROM conversation_items") == 0
    else:
        # A conversation keeps its turns while it lives.
        assert client.responses.retrieve(in_conversation).status == "completed"
        client.responses.create(model=MODEL, input="again", conversation=conversation.id)
        assert pruned(process, "conversations") == 0


def test_retention_is_off_by_default(fresh_db: str, sim: SimServer, tmp_path: Path) -> None:
    tenant = create_tenant(fresh_db)
    with serving(fresh_db, sim, tmp_path) as process:
        client = openai_client(f"{process.url}/v1", tenant.api_key, timeout=30)
        old = client.responses.create(model=MODEL, input="old").id
        backdate_response(fresh_db, old)
        # The sweep runs every few seconds whatever retention says (leases, idempotency).
        time.sleep(3)
        assert client.responses.retrieve(old).status == "completed"
        assert pruned(process, "responses") == 0
