"""The coalescing transport: a response head waits for its body, never reorders, and is
flushed by the loop when no body follows at once."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx

from agentic_api.http.protocol import CoalescingTransport
from tests.support.servers import ThreadedServer

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 7


async def test_head_and_body_go_out_in_one_write() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(HEAD)
    assert inner.writes == []
    assert transport.get_write_buffer_size() == 7 + len(HEAD)
    transport.write(b"{}")
    assert inner.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)
    assert inner.writes == [HEAD + b"{}"]


async def test_a_lone_head_is_flushed_by_the_next_loop_iteration() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(HEAD)
    await asyncio.sleep(0)
    assert inner.writes == [HEAD]
    transport.write(b"data: 1\n\n")
    assert inner.writes == [HEAD, b"data: 1\n\n"]


async def test_other_writes_pass_through_and_close_flushes() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"chunk")
    assert inner.writes == [b"chunk"]
    transport.write(HEAD)
    transport.close()
    assert inner.writes == [b"chunk", HEAD]
    assert inner.closed


def test_responses_streams_and_keep_alive_through_the_protocol() -> None:
    from fastapi import FastAPI
    from starlette.responses import StreamingResponse

    app = FastAPI()

    @app.get("/json")
    async def json_route() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/stream")
    async def stream_route() -> StreamingResponse:
        async def chunks() -> Any:
            for index in range(3):
                await asyncio.sleep(0.05)
                yield f"data: {index}\n\n".encode()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    # A bare test app, not our API: its replies are not OpenAI objects.
    server = ThreadedServer(app, strict=False).start()
    try:
        with httpx.Client(base_url=server.url) as client:
            for _ in range(3):  # one kept-alive connection, several responses
                assert client.get("/json").json() == {"ok": "yes"}
            with client.stream("GET", "/stream") as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                assert response.read() == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        # A raw client sees head and body of a JSON response in a single segment.
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            raw.sendall(b"GET /json HTTP/1.1\r\nhost: x\r\n\r\n")
            first = raw.recv(65536)
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b'{"ok":"yes"}')
    finally:
        server.stop()
