"""POST /v1/responses/input_tokens: the upstream's own count of the exact request a turn
would send, with nothing stored (on SQLite and PostgreSQL, through the official SDK)."""

from __future__ import annotations

import asyncio

import pytest
from openai import NotFoundError, OpenAI
from openai.types.responses import ToolParam
from sqlalchemy import func, select

from agentic_api.storage.database import Database
from agentic_api.storage.models import Response
from tests.conftest import RunningServer
from tests.support.tenants import create_tenant
from tests.support.typed import usage_of
from tests.upstream_sim import Reply, SimServer

# The SDK's FunctionToolParam requires "strict", which the API (and this server) take as
# optional; the tests send what clients send.
TOOLS: list[ToolParam] = [
    {  # type: ignore[list-item]
        "type": "function",
        "name": "read_file",
        "description": "Read a file from the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def stored_responses(db_url: str) -> int:
    async def run() -> int:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.read() as session:
                return int((await session.execute(select(func.count(Response.id)))).scalar_one())
        finally:
            await db.close()

    return asyncio.run(run())


def test_count_matches_the_turns_usage_and_stores_nothing(
    client: OpenAI, server: RunningServer, sim: SimServer
) -> None:
    before = stored_responses(server.db_url)
    counted = client.responses.input_tokens.count(
        model=sim.config.model, input="list the files " * 12, instructions="Be brief.", tools=TOOLS
    )
    assert counted.object == "response.input_tokens"
    assert stored_responses(server.db_url) == before
    probe = sim.last("/v1/responses")
    assert probe.json["max_output_tokens"] == 1
    assert probe.json["stream"] is False and probe.json["store"] is False

    created = client.responses.create(
        model=sim.config.model, input="list the files " * 12, instructions="Be brief.", tools=TOOLS
    )
    assert (
        counted.input_tokens
        == usage_of(created).input_tokens
        == sim.last("/v1/responses").prompt_tokens
    )
    # The count goes out under the tenant's salt, like the turn itself.
    assert probe.json["cache_salt"] == sim.last("/v1/responses").json["cache_salt"]
    assert stored_responses(server.db_url) == before + 1


def test_count_of_a_continuation_includes_the_rehydrated_history(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("a first answer with several words in it"))
    first = client.responses.create(model=sim.config.model, input="first question " * 10)
    alone = client.responses.input_tokens.count(model=sim.config.model, input="and next?")
    counted = client.responses.input_tokens.count(
        model=sim.config.model, input="and next?", previous_response_id=first.id
    )
    probe = sim.last("/v1/responses")
    assert counted.input_tokens > alone.input_tokens + usage_of(first).input_tokens
    second = client.responses.create(
        model=sim.config.model, input="and next?", previous_response_id=first.id
    )
    assert counted.input_tokens == usage_of(second).input_tokens
    # Same lineage headers as the chain, so a router sends the count where the blocks are.
    turn = sim.last("/v1/responses")
    assert probe.headers["x-session-id"] == turn.headers["x-session-id"]
    # The probe is the turn's own request, except for the two fields it overrides, the
    # id minted for the new input item (ids are not rendered into the prompt) and the
    # stored turn's request for its token ids (a count stores nothing).
    assert turn.json.pop("enable_response_messages") is True
    for body in (probe.json, turn.json):
        body.pop("max_output_tokens", None)
        body.pop("stream")
        body["input"][-1].pop("id")
    assert probe.json == turn.json


def test_count_without_input_counts_the_history(client: OpenAI, sim: SimServer) -> None:
    first = client.responses.create(model=sim.config.model, input="hello there")
    counted = client.responses.input_tokens.count(
        model=sim.config.model, previous_response_id=first.id
    )
    assert counted.input_tokens > usage_of(first).input_tokens


def test_count_is_tenant_scoped(client: OpenAI, server: RunningServer, sim: SimServer) -> None:
    first = client.responses.create(model=sim.config.model, input="mine")
    stranger = server.client(create_tenant(server.db_url))
    calls = len(sim.requests("/v1/responses"))
    with pytest.raises(NotFoundError) as error:
        stranger.responses.input_tokens.count(
            model=sim.config.model, input="x", previous_response_id=first.id
        )
    assert error.value.code == "previous_response_not_found"
    assert len(sim.requests("/v1/responses")) == calls


def test_upstream_refusal_is_relayed(client: OpenAI, sim: SimServer) -> None:
    with pytest.raises(NotFoundError):
        client.responses.input_tokens.count(model="no-such-model", input="x")


def test_count_in_a_conversation_includes_its_items(client: OpenAI, sim: SimServer) -> None:
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "earlier context " * 10}]
    )
    counted = client.responses.input_tokens.count(
        model=sim.config.model, input="and now?", conversation=conversation.id
    )
    alone = client.responses.input_tokens.count(model=sim.config.model, input="and now?")
    assert counted.input_tokens > alone.input_tokens
    created = client.responses.create(
        model=sim.config.model, input="and now?", conversation=conversation.id
    )
    assert counted.input_tokens == usage_of(created).input_tokens
