"""SSE framing of followed streams: keep-alive comments while nothing happens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson

from agentic_api.http.sse import KEEPALIVE, from_followed


async def slow_events() -> AsyncIterator[tuple[int, str]]:
    await asyncio.sleep(0.35)
    yield 0, orjson.dumps({"type": "response.queued", "sequence_number": 0}).decode()
    yield 1, orjson.dumps({"type": "response.completed", "sequence_number": 1}).decode()


async def test_keepalives_while_waiting_then_events_in_order() -> None:
    frames = [frame async for frame in from_followed(slow_events(), keepalive_seconds=0.1)]
    keepalives = [f for f in frames if f == KEEPALIVE]
    events = [f for f in frames if f != KEEPALIVE]
    assert len(keepalives) >= 2
    assert frames.index(events[0]) > frames.index(keepalives[0])
    assert events[0].startswith(b"event: response.queued\n")
    assert events[1].startswith(b"event: response.completed\n")


async def test_no_keepalive_when_events_flow() -> None:
    async def quick() -> AsyncIterator[tuple[int, str]]:
        yield 0, orjson.dumps({"type": "response.completed"}).decode()

    frames = [frame async for frame in from_followed(quick(), keepalive_seconds=5)]
    assert frames == [b'event: response.completed\ndata: {"type":"response.completed"}\n\n']
