"""The turn channel hands a reader every event published so far in one take, each with the
JSON it was published with, and still delivers the close or the failure that came after
them, once they are read."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agentic_api.turns.runner.channel import TurnChannel


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
