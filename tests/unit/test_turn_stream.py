"""The streamed turn's handle (``turns/run.py``): the wait for the upstream's
acceptance, and the disconnect rule, against a stub upstream and a SQLite file."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentic_api.errors import ApiError
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.run import TurnStream, Work, open_stream
from tests.support.loopback import answering, json_answer, read_request, sse_answer, sse_frames
from tests.support.stub_turns import (
    STARTED,
    completed_event,
    migrated_sqlite,
    new_caller,
    prepared,
    services_with,
    stored,
)


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return migrated_sqlite(tmp_path_factory)


@pytest.fixture(scope="module")
def caller(database_url: str) -> Caller:
    return new_caller(database_url)


class HeldUpstream:
    """Streams the start of an answer at once and its end when ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(sse_answer(STARTED))
        await writer.drain()
        await self.release.wait()
        writer.write(sse_frames([completed_event()]))
        await writer.drain()
        writer.close()


class ClientLeft(Exception):
    """What the reader's side raises when its client goes away."""


async def test_a_refusal_is_raised_once_the_turn_and_what_it_held_have_ended(
    database_url: str, caller: Caller
) -> None:
    refusal = json_answer(400, {"error": {"message": "no", "type": "BadRequestError"}})
    held: list[str] = []

    async def guard(work: Work) -> dict[str, Any]:
        held.append("held")
        try:
            return await work
        finally:
            # Releasing takes a while (an Idempotency-Key's release is a write).
            await asyncio.sleep(0.05)
            held.append("released")

    async with services_with(database_url, answering(refusal)) as services:
        turn = await prepared(services, caller, stream=True)
        stream = TurnStream(services, turn, guard)
        with pytest.raises(ApiError) as refused:
            await stream.wait_opened()
        assert refused.value.status_code == 400
        assert stream.task.done() and held == ["held", "released"]
        assert await stored(services, caller, turn.response_id) is None


async def test_with_cancel_a_reader_that_leaves_stops_the_turn(
    database_url: str, caller: Caller
) -> None:
    upstream = HeldUpstream()
    async with services_with(database_url, upstream, stream_disconnect="cancel") as services:
        turn = await prepared(services, caller, stream=True)
        stream = await open_stream(services, turn)
        with pytest.raises(ClientLeft), stream:
            first = await stream.next_event()
            assert first is not None and first["type"] == "response.created"
            raise ClientLeft
        await asyncio.wait({stream.task}, timeout=5)
        assert stream.task.cancelled()
        # Cancelled mid-stream, before its commit: nothing of the turn is stored.
        assert await stored(services, caller, turn.response_id) is None


async def test_with_complete_the_turn_outlives_its_reader_and_commits(
    database_url: str, caller: Caller
) -> None:
    upstream = HeldUpstream()
    async with services_with(database_url, upstream, stream_disconnect="complete") as services:
        turn = await prepared(services, caller, stream=True)
        stream = await open_stream(services, turn)
        with pytest.raises(ClientLeft), stream:
            await stream.next_event()
            raise ClientLeft
        upstream.release.set()
        final = await asyncio.wait_for(stream.result(), timeout=5)
        assert final["status"] == "completed"
        row = await stored(services, caller, turn.response_id)
        assert row is not None and row.status == "completed"


async def test_a_reader_that_reads_to_the_end_leaves_the_turn_alone(
    database_url: str, caller: Caller
) -> None:
    upstream = HeldUpstream()
    upstream.release.set()
    async with services_with(database_url, upstream, stream_disconnect="cancel") as services:
        turn = await prepared(services, caller, stream=True)
        stream = await open_stream(services, turn)
        seen: list[str] = []
        next_event = stream.next_event
        with stream:
            while (event := await next_event()) is not None:
                seen.append(str(event["type"]))
        assert seen[0] == "response.created" and seen[-1] == "response.completed"
        assert (await stream.result())["status"] == "completed"
