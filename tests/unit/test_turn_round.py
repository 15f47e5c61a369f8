"""The upstream round's one failure rule, for a plain turn run against a stub upstream
(a scripted loopback server) and a SQLite file: refused before the turn began, the
refusal is raised and nothing is stored; failed after, the failure is stored and the
stream ends with ``error`` + ``response.failed``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from agentic_api.errors import ApiError
from agentic_api.storage.models import Response
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.run import TurnFailed, run_turn
from agentic_api.turns.runner.channel import TurnChannel
from tests.support.loopback import Handler, answering, json_answer, sse_answer
from tests.support.stub_turns import (
    STARTED,
    completed_event,
    migrated_sqlite,
    new_caller,
    prepared,
    services_with,
    stored,
    upstream_final,
)

REFUSAL = json_answer(400, {"error": {"message": "no such thing", "type": "BadRequestError"}})


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return migrated_sqlite(tmp_path_factory)


@pytest.fixture(scope="module")
def caller(database_url: str) -> Caller:
    return new_caller(database_url)


@dataclass
class Ran:
    turn: PreparedTurn
    outcome: dict[str, Any] | BaseException
    # What a streaming client got: None when the stream never opened (and why).
    events: list[dict[str, Any]] | None
    refusal: BaseException | None
    row: Response | None


async def run(database_url: str, caller: Caller, handler: Handler, *, stream: bool) -> Ran:
    async with services_with(database_url, handler) as services:
        turn = await prepared(services, caller, stream=stream)
        channel = TurnChannel() if stream else None
        outcome: dict[str, Any] | BaseException
        try:
            outcome = await run_turn(services, turn, channel)
        except (ApiError, TurnFailed) as exc:
            outcome = exc
        events: list[dict[str, Any]] | None = None
        refusal: BaseException | None = None
        if channel is not None:
            try:
                await channel.wait_opened()
            except ApiError as exc:
                refusal = exc
            else:
                events = []
                while (event := await channel.next_event()) is not None:
                    events.append(event)
        row = await stored(services, caller, turn.response_id)
    return Ran(turn, outcome, events, refusal, row)


def types(events: list[dict[str, Any]] | None) -> list[str]:
    assert events is not None
    return [str(event["type"]) for event in events]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_refusal_before_the_turn_began_is_raised_and_nothing_is_stored(
    database_url: str, caller: Caller, stream: bool
) -> None:
    ran = await run(database_url, caller, answering(REFUSAL), stream=stream)
    assert isinstance(ran.outcome, ApiError) and ran.outcome.status_code == 400
    assert ran.row is None
    if stream:
        # The client waiting for the stream to open gets the refusal, as a plain error.
        assert ran.refusal is ran.outcome


async def test_a_stream_cut_after_it_was_accepted_is_a_stored_failure(
    database_url: str, caller: Caller
) -> None:
    ran = await run(database_url, caller, answering(sse_answer(STARTED)), stream=True)
    assert isinstance(ran.outcome, TurnFailed)
    assert ran.outcome.error.code == "upstream_stream_interrupted"
    assert types(ran.events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_text.delta",
        "error",
        "response.failed",
    ]
    assert ran.events is not None
    assert [e["sequence_number"] for e in ran.events] == list(range(6))
    assert ran.row is not None and ran.row.status == "failed"
    # Never a checkpoint: a failed turn has no prefix digest to continue from.
    assert ran.row.prefix_digest is None


async def test_a_stream_that_ends_before_its_first_event_still_opens_then_fails(
    database_url: str, caller: Caller
) -> None:
    ran = await run(database_url, caller, answering(sse_answer([])), stream=True)
    assert isinstance(ran.outcome, TurnFailed)
    assert types(ran.events) == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert ran.row is not None and ran.row.status == "failed"


async def test_an_answer_lost_on_its_way_back_is_a_stored_failure(
    database_url: str, caller: Caller
) -> None:
    async def answer_half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        writer.write(b'content-length: 100\r\n\r\n{"id":')
        await writer.drain()
        writer.close()

    ran = await run(database_url, caller, answer_half, stream=False)
    # The request reached the model: the turn happened, and failed.
    assert isinstance(ran.outcome, TurnFailed)
    assert ran.row is not None and ran.row.status == "failed"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_malformed_answer_is_a_stored_failure_never_a_checkpoint(
    database_url: str, caller: Caller, stream: bool
) -> None:
    final = {**upstream_final(), "output": "oops"}
    answer = (
        sse_answer([*STARTED[:1], {"type": "response.completed", "response": final}])
        if stream
        else json_answer(200, final)
    )
    ran = await run(database_url, caller, answering(answer), stream=stream)
    assert isinstance(ran.outcome, TurnFailed)
    assert ran.outcome.error.code == "upstream_invalid_response"
    assert ran.row is not None and ran.row.status == "failed"
    assert ran.row.error is not None and ran.row.error["code"] == "upstream_invalid_response"
    assert ran.row.prefix_digest is None
    if stream:
        assert types(ran.events)[-2:] == ["error", "response.failed"]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_whole_answer_is_committed_before_its_terminal_event(
    database_url: str, caller: Caller, stream: bool
) -> None:
    final = upstream_final()
    answer = sse_answer([*STARTED, completed_event()]) if stream else json_answer(200, final)
    ran = await run(database_url, caller, answering(answer), stream=stream)
    assert isinstance(ran.outcome, dict) and ran.outcome["status"] == "completed"
    assert ran.row is not None and ran.row.status == "completed"
    assert ran.row.prefix_digest is not None
    if stream:
        assert types(ran.events) == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_text.delta",
            "response.completed",
        ]
