"""The upstream client's own pieces: transport error mapping (SSE decoding:
tests/unit/test_sse_decoder.py)."""

from __future__ import annotations

import asyncio
import socket

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
