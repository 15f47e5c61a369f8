"""Turns run in the test's process against a stub upstream (``tests/support/loopback.py``)
and a SQLite file: the unit tier's way to drive the turn pipeline without a server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest

from agentic_api.cache.recent import RecentArtifacts
from agentic_api.runtime import Runtime
from agentic_api.settings import Settings
from agentic_api.storage.database import Database
from agentic_api.storage.migrate import upgrade
from agentic_api.storage.models import Response
from agentic_api.storage.responses import ResponseRepository
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.upstream.capabilities import TokenCapabilityMemo
from agentic_api.wire.requests import parse_create_request
from tests.support.databases import sqlite_url
from tests.support.loopback import Handler, client_of
from tests.support.tenants import create_tenant

MODEL = "stub-model"


def migrated_sqlite(factory: pytest.TempPathFactory) -> str:
    url = sqlite_url(factory.mktemp("turns"))
    upgrade(url)
    return url


def new_caller(database_url: str) -> Caller:
    return Caller(create_tenant(database_url).id, 0, "salt-of-the-test-tenant")


@asynccontextmanager
async def services_with(
    database_url: str, handler: Handler, **settings: Any
) -> AsyncIterator[Runtime]:
    """A runtime whose upstream is ``handler``; ``settings``: Settings fields to set."""
    async with client_of(handler) as upstream:
        db = Database.from_url(database_url, pool_size=1)
        try:
            yield Runtime(
                settings=Settings(database_url=database_url, **settings),
                db=db,
                upstream=upstream,
                secret=b"s" * 32,
                tokens=TokenCapabilityMemo(upstream, "off"),
                artifacts=RecentArtifacts(0),
            )
        finally:
            await db.close()


async def prepared(services: Runtime, caller: Caller, *, stream: bool) -> PreparedTurn:
    request, _raw = parse_create_request(
        orjson.dumps({"model": MODEL, "input": "hello", "stream": stream})
    )
    return await prepare_turn(services, caller, request)


async def stored(services: Runtime, caller: Caller, response_id: str) -> Response | None:
    async with services.db.read() as session:
        return await ResponseRepository(session).get_any(caller.tenant_id, response_id)


# What a model server streams: the response, one message, one delta; then the end.
UPSTREAM_MESSAGE = {"id": "msg_up", "type": "message", "role": "assistant", "content": []}
WHOLE_MESSAGE = {
    **UPSTREAM_MESSAGE,
    "status": "completed",
    "content": [{"type": "output_text", "text": "hi", "annotations": []}],
}
USAGE = {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}
STARTED: list[dict[str, Any]] = [
    {"type": "response.created", "response": {"id": "resp_up", "status": "in_progress"}},
    {"type": "response.output_item.added", "output_index": 0, "item": UPSTREAM_MESSAGE},
    {
        "type": "response.output_text.delta",
        "output_index": 0,
        "item_id": "msg_up",
        "content_index": 0,
        "delta": "hi",
    },
]


def upstream_final() -> dict[str, Any]:
    return {"id": "resp_up", "status": "completed", "output": [WHOLE_MESSAGE], "usage": USAGE}


def completed_event() -> dict[str, Any]:
    return {"type": "response.completed", "response": upstream_final()}
