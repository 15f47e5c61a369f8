"""The turn channel hands a reader every event published so far in one take, each with the
JSON it was published with, and still delivers the close or the failure that came after
them, once they are read."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agentic_api.turns.runner.channel import Published, ReaderGone, TurnChannel


def publish(channel: TurnChannel, number: int) -> dict[str, Any]:
    kind = "response.output_text.delta"
    event: dict[str, Any] = {"type": kind, "sequence_number": number}
    channel.publish(kind, number, orjson.dumps(event))
    return event


def events(taken: list[Published]) -> list[dict[str, Any]]:
    """What a take holds, as events (each checked against the type and number it was
    published with)."""
    parsed = [orjson.loads(data) for _, _, data in taken]
    assert [(e["type"], e["sequence_number"]) for e in parsed] == [(k, n) for k, n, _ in taken]
    return parsed


async def test_events_that_piled_up_come_in_one_take_then_the_close() -> None:
    channel = TurnChannel()
    published = [publish(channel, number) for number in range(3)]
    channel.close()
    taken = await channel.next_events()
    assert events(taken) == published
    assert [data for _, _, data in taken] == [orjson.dumps(e) for e in published]
    assert await channel.next_events() == []
    assert await channel.next_event() is None


async def test_a_take_waits_for_the_first_event_only() -> None:
    channel = TurnChannel()
    reader = asyncio.ensure_future(channel.next_events())
    await asyncio.sleep(0)
    assert not reader.done()
    first = publish(channel, 0)
    assert events(await reader) == [first]
    second = publish(channel, 1)
    assert await channel.next_event() == second


async def test_a_failure_after_events_is_raised_after_they_are_taken() -> None:
    channel = TurnChannel()
    first = publish(channel, 0)
    channel.failed_to_open(RuntimeError("upstream gone"))
    publish(channel, 1)
    assert events(await channel.next_events()) == [first]
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
    assert [e["sequence_number"] for e in events(await channel.next_events())] == [1]
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


class Client:
    """A reader's direct writes: takes them while ``keeping_up``, else refuses."""

    def __init__(self) -> None:
        self.keeping_up = True
        self.writes: list[list[int]] = []

    def write(self, batch: list[Published]) -> bool:
        if not self.keeping_up:
            return False
        self.writes.append([e["sequence_number"] for e in events(batch)])
        return True


def direct_channel() -> tuple[TurnChannel, Client]:
    channel = TurnChannel()
    client = Client()
    channel.write_directly(client.write)
    return channel, client


async def waiting_reader(channel: TurnChannel) -> asyncio.Future[list[Any]]:
    reader = asyncio.ensure_future(channel.next_events())
    await asyncio.sleep(0)
    return reader


async def test_while_the_reader_waits_each_steps_events_are_written_directly_at_once() -> None:
    channel, client = direct_channel()
    reader = await waiting_reader(channel)
    publish(channel, 0)
    publish(channel, 1)
    assert client.writes == []  # (written at the end of the loop's step, together)
    await asyncio.sleep(0)
    assert client.writes == [[0, 1]]
    publish(channel, 2)
    await asyncio.sleep(0)
    assert client.writes == [[0, 1], [2]]
    # The reader was never woken: it still waits, for the close.
    assert not reader.done()
    channel.close()
    assert await reader == []
    assert channel.closed


async def test_a_client_that_cannot_take_a_write_gets_the_batch_through_the_reader() -> None:
    channel, client = direct_channel()
    reader = await waiting_reader(channel)
    client.keeping_up = False
    publish(channel, 0)
    publish(channel, 1)
    await asyncio.sleep(0)
    assert [e["sequence_number"] for e in events(await reader)] == [0, 1]
    # The reader holds events now (it is sending them): nothing goes around it.
    client.keeping_up = True
    publish(channel, 2)
    await asyncio.sleep(0)
    assert client.writes == []
    assert [e["sequence_number"] for e in events(await channel.next_events())] == [2]
    # Waiting again with nothing left, it is bypassed again.
    reader = await waiting_reader(channel)
    publish(channel, 3)
    await asyncio.sleep(0)
    assert client.writes == [[3]]
    assert not reader.done()
    reader.cancel()


async def test_a_close_right_after_a_batch_goes_to_the_reader_with_it() -> None:
    channel, client = direct_channel()
    reader = await waiting_reader(channel)
    publish(channel, 0)
    channel.close()
    # One take of the last events and the close: the body ends in the same write.
    assert [e["sequence_number"] for e in events(await reader)] == [0]
    assert channel.closed
    await asyncio.sleep(0)
    assert client.writes == []


async def test_a_failure_after_a_batch_comes_after_the_batch() -> None:
    channel, client = direct_channel()
    reader = await waiting_reader(channel)
    publish(channel, 0)
    channel.failed_to_open(RuntimeError("upstream gone"))
    assert client.writes == [[0]]
    with pytest.raises(RuntimeError, match="upstream gone"):
        await reader


async def test_nothing_is_written_for_a_reader_whose_client_left() -> None:
    channel, client = direct_channel()
    reader = await waiting_reader(channel)
    publish(channel, 0)
    channel.reader_gone()
    await asyncio.sleep(0)
    assert client.writes == []
    with pytest.raises(ReaderGone):
        await asyncio.wait_for(reader, 10)
    publish(channel, 1)
    await asyncio.sleep(0)
    assert client.writes == []


async def test_a_publisher_that_flushes_itself_decides_each_batch() -> None:
    channel, client = direct_channel()
    reader = await waiting_reader(channel)
    with channel.batched() as flush:
        publish(channel, 0)
        publish(channel, 1)
        await asyncio.sleep(0)
        # Not at the end of the loop's step: at the publisher's flush (a chunk's end).
        assert client.writes == []
        flush()
        assert client.writes == [[0, 1]]
        publish(channel, 2)
    # What is left goes with the end of the block.
    assert client.writes == [[0, 1], [2]]
    assert not reader.done()
    # Outside it, the loop's step ends a batch again.
    publish(channel, 3)
    await asyncio.sleep(0)
    assert client.writes == [[0, 1], [2], [3]]
    reader.cancel()
