"""A raw HTTP server on loopback that answers as a test scripts it, and an
``UpstreamClient`` pointed at it: the stub upstream of the unit tier (the real client,
over real sockets, talking to a handler that writes exactly the bytes a test wants)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import orjson

from agentic_api.upstream.client import UpstreamClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def client_of(
    handler: Handler, *, host: str = "127.0.0.1", path: str = "", **options: Any
) -> AsyncIterator[UpstreamClient]:
    """An UpstreamClient pointed at a raw TCP server on loopback answering with ``handler``.

    On exit the handlers still running are cancelled and their connections closed (an
    unclosed transport is a ResourceWarning, an error in this suite)."""
    handlers: set[asyncio.Task[None]] = set()
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        writers.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = UpstreamClient(f"http://{host}:{port}{path}", **options)
    try:
        yield client
    finally:
        await client.aclose()
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        for writer in writers:
            writer.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Reads one request (head and body); returns the body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    return await reader.readexactly(length)


def json_answer(status: int, value: Any) -> bytes:
    """A whole JSON answer (its connection closed after it)."""
    body = orjson.dumps(value)
    head = (
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def sse_answer(events: Iterable[dict[str, Any]]) -> bytes:
    """An event stream answer; the stream ends where the connection is closed."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    return head + sse_frames(events)


def sse_frames(events: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(
        b"event: " + str(e["type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"
        for e in events
    )


def answering(*answers: bytes) -> Handler:
    """A handler that reads each request and answers it with the next of ``answers``
    (written whole, then the connection closed)."""
    queue = list(answers)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(queue.pop(0))
        await writer.drain()
        writer.close()

    return handle
