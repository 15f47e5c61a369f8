"""The turn channel hands a reader every event published so far in one take, and still
delivers the close or the failure that came after them, once they are read."""

from __future__ import annotations

import asyncio

import pytest

from agentic_api.turns.channel import TurnChannel


async def test_events_that_piled_up_come_in_one_take_then_the_close() -> None:
    channel = TurnChannel()
    for number in range(3):
        channel.publish({"sequence_number": number})
    channel.close()
    assert [e["sequence_number"] for e in await channel.next_events()] == [0, 1, 2]
    assert await channel.next_events() == []
    assert await channel.next_event() is None


async def test_a_take_waits_for_the_first_event_only() -> None:
    channel = TurnChannel()
    reader = asyncio.ensure_future(channel.next_events())
    await asyncio.sleep(0)
    assert not reader.done()
    channel.publish({"sequence_number": 0})
    assert await reader == [{"sequence_number": 0}]
    channel.publish({"sequence_number": 1})
    assert await channel.next_events() == [{"sequence_number": 1}]


async def test_a_failure_after_events_is_raised_after_they_are_taken() -> None:
    channel = TurnChannel()
    channel.publish({"sequence_number": 0})
    channel.failed_to_open(RuntimeError("upstream gone"))
    channel.publish({"sequence_number": 1})
    assert await channel.next_events() == [{"sequence_number": 0}]
    with pytest.raises(RuntimeError, match="upstream gone"):
        await channel.next_events()
