"""The upstream client's own pieces: transport error mapping (SSE decoding:
tests/unit/test_sse_decoder.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

from agentic_api.errors import UpstreamError
from agentic_api.upstream.client import UpstreamClient
from agentic_api.upstream.errors import UpstreamInterrupted
from tests.support.loopback import client_of


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_connection_refused_is_unreachable_even_for_a_turn() -> None:
    client = UpstreamClient(f"http://127.0.0.1:{closed_port()}")
    try:
        with pytest.raises(UpstreamError) as error:
            await client.create_response(b"{}", {})
        # Nothing reached the model: not an interrupted turn.
        assert not isinstance(error.value, UpstreamInterrupted)
        assert (error.value.status_code, error.value.code) == (502, "upstream_unreachable")
    finally:
        await client.aclose()


async def test_answer_cut_after_the_request_was_sent_is_interrupted() -> None:
    async def answer_half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        writer.write(b'content-length: 100\r\n\r\n{"id":')
        await writer.drain()
        writer.close()

    async with client_of(answer_half) as client:
        with pytest.raises(UpstreamInterrupted) as error:
            await client.create_response(b"{}", {})
        assert error.value.code == "upstream_stream_interrupted"


async def test_silence_past_the_read_timeout_is_a_504() -> None:
    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)
        writer.close()

    async with client_of(never_answer, read_timeout=0.2) as client:
        with pytest.raises(UpstreamInterrupted) as error:
            await client.create_response(b"{}", {})
        assert (error.value.status_code, error.value.code) == (504, "upstream_timeout")
        with pytest.raises(UpstreamError) as unsent:
            await client.post_json("/v1/other", {})
        assert (unsent.value.status_code, unsent.value.code) == (504, "upstream_timeout")


def event_stream_answer(
    gaps: list[float], *, then_silent: bool
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """An upstream that answers a stream with one event after each of ``gaps`` seconds,
    then either ends the stream or goes silent with the connection open."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for number, gap in enumerate(gaps):
            await asyncio.sleep(gap)
            event = b'data: {"type":"tick","n":%d}\n\n' % number
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            await writer.drain()
        if then_silent:
            await asyncio.sleep(30)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    return answer


async def read_stream(client: UpstreamClient) -> list[str]:
    async with client.stream_response(b"{}", {}) as stream:
        return [sse.data.decode() async for sse in stream.events()]


async def test_a_stream_silent_past_the_read_timeout_is_a_504() -> None:
    async with client_of(event_stream_answer([0], then_silent=True), read_timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(UpstreamInterrupted) as error:
            await read_stream(client)
        assert (error.value.status_code, error.value.code) == (504, "upstream_timeout")
        assert 0.25 < time.monotonic() - started < 5


async def test_a_stream_that_keeps_sending_is_never_cut_off_however_long_it_lasts() -> None:
    # Each gap within the read timeout, the whole stream several times longer.
    gaps = [0.1] * 12
    async with client_of(event_stream_answer(gaps, then_silent=False), read_timeout=0.3) as client:
        events = await read_stream(client)
    assert events == [f'{{"type":"tick","n":{n}}}' for n in range(len(gaps))]


async def test_base_url_path_prefix_is_kept() -> None:
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0])
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    async with client_of(record, path="/llm/") as client:
        assert await client.create_response(b"{}", {}) == {}
        assert seen == [b"POST /llm/v1/responses HTTP/1.1"]


async def test_cookies_the_upstream_sets_are_not_sent_back() -> None:
    cookies: list[bytes] = []

    async def set_cookie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            cookies.extend(
                line for line in head.split(b"\r\n") if line.lower().startswith(b"cookie:")
            )
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\nset-cookie: replica=r1; Path=/\r\ncontent-length: 2\r\n\r\n{}"
            )
            await writer.drain()
        writer.close()

    # A host name: cookie jars ignore cookies from bare IP addresses anyway.
    async with client_of(set_cookie, host="localhost") as client:
        for _ in range(2):
            assert await client.create_response(b"{}", {}) == {}
        assert cookies == []
