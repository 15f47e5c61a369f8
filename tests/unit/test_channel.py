"""The turn channel hands a reader every event published so far in one take, each with the
JSON it was published with, and still delivers the close or the failure that came after
them, once they are read."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agentic_api.turns.runner.channel import ReaderGone, TurnChannel


def publish(channel: TurnChannel, number: int) -> dict[str, Any]:
    event = {"sequence_number": number}
    channel.publish(event, orjson.dumps(event))
    return event


async def test_events_that_piled_up_come_in_one_take_then_the_close() -> None:
    channel = TurnChannel()
    published = [publish(channel, number) for number in range(3)]
    channel.close()
    taken = await channel.next_events()
    assert [event for event, _ in taken] == published
    assert [data for _, data in taken] == [orjson.dumps(e) for e in published]
    assert await channel.next_events() == []
    assert await channel.next_event() is None


async def test_a_take_waits_for_the_first_event_only() -> None:
    channel = TurnChannel()
    reader = asyncio.ensure_future(channel.next_events())
    await asyncio.sleep(0)
    assert not reader.done()
    first = publish(channel, 0)
    assert [event for event, _ in await reader] == [first]
    second = publish(channel, 1)
    assert await channel.next_event() == second


async def test_a_failure_after_events_is_raised_after_they_are_taken() -> None:
    channel = TurnChannel()
    first = publish(channel, 0)
    channel.failed_to_open(RuntimeError("upstream gone"))
    publish(channel, 1)
    assert [event for event, _ in await channel.next_events()] == [first]
    with pytest.raises(RuntimeError, match="upstream gone"):
        await channel.next_events()


async def test_a_close_right_after_the_events_is_taken_with_them() -> None:
    channel = TurnChannel()
    publish(channel, 0)
    assert not channel.closed
    assert len(await channel.next_events()) == 1
    assert not channel.closed
    publish(channel, 1)
    channel.close()
    # The reader can end its body in the same write as these events.
    assert [event for event, _ in await channel.next_events()] == [{"sequence_number": 1}]
    assert channel.closed
    assert await channel.next_events() == []


async def test_a_reader_whose_client_left_stops_waiting_and_taking() -> None:
    channel = TurnChannel()
    reader = asyncio.ensure_future(channel.next_events())
    await asyncio.sleep(0)
    channel.reader_gone()
    # (A bound so that a reader left waiting fails the test instead of hanging it.)
    with pytest.raises(ReaderGone):
        await asyncio.wait_for(reader, 10)
    # Events published after the client left are not handed to anyone.
    publish(channel, 0)
    with pytest.raises(ReaderGone):
        await channel.next_events()
