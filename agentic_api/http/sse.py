"""SSE responses: framing our events for the client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
from starlette.responses import StreamingResponse

from agentic_api.turns.stream import TurnStream
from agentic_api.upstream.sse import frame_sse

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def event_bytes(event: dict[str, Any]) -> bytes:
    return frame_sse(str(event.get("type", "message")), orjson.dumps(event))


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


async def from_turn(stream: TurnStream) -> AsyncIterator[bytes]:
    next_events = stream.channel.next_events
    # Leaving early (the client went away) applies the stream's disconnect rule.
    with stream:
        # Every event published by now in one write: when the server falls behind, the
        # events that piled up cost one write (and one wake-up of the client), not one each.
        while events := await next_events():
            yield b"".join([frame_sse(str(e.get("type", "message")), d) for e, d in events])


async def from_list(events: Iterable[dict[str, Any]]) -> AsyncIterator[bytes]:
    for event in events:
        yield event_bytes(event)


async def from_stored(events: Iterable[tuple[int, str]]) -> AsyncIterator[bytes]:
    for _sequence, data in events:
        event = orjson.loads(data)
        yield frame_sse(str(event.get("type", "message")), data.encode())


KEEPALIVE_SECONDS = 15.0
KEEPALIVE = b": keep-alive\n\n"


async def from_followed(
    events: AsyncIterator[tuple[int, str]], keepalive_seconds: float = KEEPALIVE_SECONDS
) -> AsyncIterator[bytes]:
    """Frames stored events as they are read (a response still running is followed).

    A job may wait in the queue for a while; an SSE comment every ``keepalive_seconds``
    keeps proxies from closing a stream that has nothing to say yet."""
    iterator = aiter(events)
    pending: asyncio.Task[tuple[int, str]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=keepalive_seconds)
            if not done:
                yield KEEPALIVE
                continue
            try:
                _sequence, data = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            event = orjson.loads(data)
            yield frame_sse(str(event.get("type", "message")), data.encode())
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
