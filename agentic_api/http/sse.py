"""SSE responses: framing our events for the client.

A streamed turn is written by ``TurnEventStream`` rather than Starlette's
``StreamingResponse``: under uvicorn (ASGI spec 2.3) that response runs its body in a
task of its own beside a task listening for the disconnect, with an async generator
between the channel and ``send``, so each relayed event woke two tasks and three
generator frames. Here the request's own task reads the channel and sends; a small
watcher only tells the channel when the client leaves. Under our uvicorn protocol
(``http/protocol.py``) the turn's task writes the events itself while the client keeps
up, and this task only starts and ends the body and takes over when the client lags.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from agentic_api.http.protocol import DIRECT_BODY, DirectBody
from agentic_api.serving.results import Published, ReaderGone, TurnStream
from agentic_api.wire.sse import frame_sse

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def event_bytes(event: dict[str, Any]) -> bytes:
    return frame_sse(str(event.get("type", "message")), orjson.dumps(event))


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


class TurnEventStream(Response):
    """A streamed turn's SSE response: the same head as ``sse_response`` (the status,
    ``text/event-stream; charset=utf-8``, ``SSE_HEADERS``), then every event the turn
    publishes, the events published by then in one write each time, the last of them
    with the end of the body."""

    media_type = "text/event-stream"

    def __init__(self, stream: TurnStream) -> None:
        self.stream = stream
        self.status_code = 200
        self.background = None
        self.init_headers(SSE_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = self.stream
        channel = stream.channel
        next_events = channel.next_events
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        direct_body = scope.get("extensions", {}).get(DIRECT_BODY)
        if isinstance(direct_body, DirectBody):
            channel.write_directly(_framing_for(direct_body))
        watcher = asyncio.ensure_future(_client_gone(receive))
        watcher.add_done_callback(lambda _: channel.reader_gone())
        more = True
        try:
            # Leaving early (the client went away) applies the stream's disconnect rule.
            with stream:
                while more and (events := await next_events()):
                    body = b"".join([frame_sse(kind, d) for kind, _, d in events])
                    more = not channel.closed
                    await send({"type": "http.response.body", "body": body, "more_body": more})
            if more:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except ReaderGone:
            return
        finally:
            watcher.cancel()


def _framing_for(direct_body: DirectBody) -> Callable[[list[Published]], bool]:
    write = direct_body.write

    def write_events(events: list[Published]) -> bool:
        return write(b"".join([frame_sse(kind, d) for kind, _, d in events]))

    return write_events


async def _client_gone(receive: Receive) -> None:
    """Returns once the client disconnected (or the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass


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
