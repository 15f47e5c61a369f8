"""Puts ``tests/support/strict.py`` between the suite and every server of ours, so nothing
the suite receives from one escapes the strict checks.

The checks sit in the clients' transports, the one place every reader goes through:

- ``httpx.HTTPTransport`` / ``httpx.AsyncHTTPTransport``: the official SDK's clients, raw
  ``httpx`` calls and clients, the bench client. JSON replies are checked when their body
  has been read, SSE replies event by event as they are read (stored-event replays and
  background follows included);
- ``websockets``' client connections (the SDK's ``responses.connect()`` and the raw
  helper in ``tests/support/websocket.py``): every frame as it is received.

Only replies from watched origins are checked (``watch``: our in-process servers and
``agentic-api serve`` subprocesses register themselves), never the simulator's or an
MCP server's, which speak for vLLM and MCP.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import httpx2
import orjson
from websockets.asyncio.client import ClientConnection as AsyncSocket
from websockets.sync.client import ClientConnection as SyncSocket

from tests.support import strict

_lock = threading.Lock()
_origins: set[str] = set()


def _origin_of(url: Any) -> str:
    return f"{url.scheme}://{url.host}:{url.port}"


def watch(base_url: str) -> None:
    with _lock:
        _origins.add(_origin_of(httpx.URL(base_url)))


def unwatch(base_url: str) -> None:
    with _lock:
        _origins.discard(_origin_of(httpx.URL(base_url)))


def watched(url: Any) -> bool:
    with _lock:
        return _origin_of(url) in _origins


# -- SSE, read incrementally ------------------------------------------------------------------


class SseChecker:
    """Splits an SSE byte stream into events and checks each (and the stream as a whole)."""

    def __init__(self, where: str, vocabulary: strict.Vocabulary = strict.STANDARD) -> None:
        self.where = where
        self.stream = strict.StreamCheck(where, vocabulary=vocabulary)
        self._buffer = b""

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            self._block(block)

    def _block(self, block: bytes) -> None:
        name: str | None = None
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if not line or line.startswith(b":"):
                continue  # keep-alive comments
            field, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if field == b"event":
                name = value.decode()
            elif field == b"data":
                data.append(value)
            else:
                strict.fail("sse.field", self.where, f"unexpected SSE field {field!r}")
        if not data:
            return
        try:
            event = orjson.loads(b"\n".join(data))
        except orjson.JSONDecodeError:
            strict.fail("sse.data", self.where, f"undecodable event data {data!r}"[:300])
            return
        if not isinstance(event, dict) or name != event.get("type"):
            strict.fail("sse.event", self.where, f"event name {name!r} is not the data's type")
        self.stream.feed(event)

    def close(self) -> None:
        if self._buffer.strip():
            strict.fail("sse.truncated", self.where, "the stream ended inside an event")


class _Reply:
    """What to check of one reply, fed with its body as it is read."""

    def __init__(self, request: Any, response: Any) -> None:
        self.method = request.method
        self.path = request.url.path
        self.status = response.status_code
        self.where = f"{self.method} {self.path}"
        # The beta path's replies carry the beta's items and events.
        beta = request.url.params.get("beta") == "true"
        self.vocabulary = strict.BETA if beta else strict.STANDARD
        media = response.headers.get("content-type", "").split(";")[0].strip()
        ours = strict.is_openai_route(self.path)
        self.sse = (
            SseChecker(self.where, self.vocabulary)
            if ours and media == "text/event-stream"
            else None
        )
        self.json = ours and media == "application/json"
        self.ours = ours
        self.body = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self.sse is not None:
            self.sse.feed(chunk)
        elif self.json:
            self.body += chunk

    def done(self) -> None:
        if self.sse is not None:
            self.sse.close()
        elif self.json:
            strict.check_json_reply(
                self.method, self.path, self.status, bytes(self.body), self.vocabulary
            )
        elif self.ours and self.status >= 400 and self.path.startswith(("/v1/", "/admin/")):
            strict.fail("error.media", self.where, f"error reply without JSON ({self.status})")


def _checked_streams(http: Any) -> tuple[type, type]:
    """Body streams of ``http`` (httpx or httpx2) that feed a ``_Reply`` as they are read."""

    class CheckedStream(http.SyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, reply: _Reply) -> None:
            self.inner = inner
            self.reply = reply

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.inner:
                self.reply.feed(chunk)
                yield chunk
            self.reply.done()

        def close(self) -> None:
            self.inner.close()

    class CheckedAsyncStream(http.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, reply: _Reply) -> None:
            self.inner = inner
            self.reply = reply

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                self.reply.feed(chunk)
                yield chunk
            self.reply.done()

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CheckedStream, CheckedAsyncStream


# -- WebSocket frames -------------------------------------------------------------------------

_socket_streams: weakref.WeakKeyDictionary[Any, strict.StreamCheck] = weakref.WeakKeyDictionary()


def _socket_check(connection: SyncSocket | AsyncSocket, message: Any) -> None:
    request = connection.request
    host = request.headers.get("Host") if request else None
    if request is None or host is None or not watched(httpx.URL(f"http://{host}")):
        return
    stream = _socket_streams.get(connection)
    if stream is None:
        # A beta connection (client.beta.responses.connect) sends the beta's events.
        beta = request.headers.get("OpenAI-Beta") is not None
        stream = _socket_streams[connection] = strict.StreamCheck(
            f"WebSocket {request.path}",
            socket=True,
            vocabulary=strict.BETA if beta else strict.STANDARD,
        )
    text = message.decode() if isinstance(message, bytes) else message
    try:
        frame = orjson.loads(text)
    except orjson.JSONDecodeError:
        strict.fail("socket.frame", stream.where, f"undecodable frame {text[:200]!r}")
        return
    stream.feed(frame, frame.get("stream_id") if isinstance(frame, dict) else None)


# -- installing it ----------------------------------------------------------------------------

_installed = False


def install() -> None:
    """Patches the transports once per test process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    # The official SDK ships its own fork of httpx (httpx2); raw tests use httpx.
    for http in (httpx, httpx2):
        _patch_transports(http)
    _patch_sockets()


def _patch_transports(http: Any) -> None:
    checked, checked_async = _checked_streams(http)
    sync_handle = http.HTTPTransport.handle_request
    async_handle = http.AsyncHTTPTransport.handle_async_request

    def handle_request(self: Any, request: Any) -> Any:
        response = sync_handle(self, request)
        if watched(request.url):
            response.stream = checked(response.stream, _Reply(request, response))
        return response

    async def handle_async_request(self: Any, request: Any) -> Any:
        response = await async_handle(self, request)
        if watched(request.url):
            response.stream = checked_async(response.stream, _Reply(request, response))
        return response

    http.HTTPTransport.handle_request = handle_request
    http.AsyncHTTPTransport.handle_async_request = handle_async_request


def _patch_sockets() -> None:
    sync_recv: Callable[..., Any] = SyncSocket.recv
    async_recv: Callable[..., Any] = AsyncSocket.recv

    def recv(self: SyncSocket, *args: Any, **kwargs: Any) -> Any:
        message = sync_recv(self, *args, **kwargs)
        _socket_check(self, message)
        return message

    async def recv_async(self: AsyncSocket, *args: Any, **kwargs: Any) -> Any:
        message = await async_recv(self, *args, **kwargs)
        _socket_check(self, message)
        return message

    # recv is overloaded in websockets' stubs; the wrapper passes every overload through.
    SyncSocket.recv = recv  # type: ignore[method-assign, assignment]
    AsyncSocket.recv = recv_async  # type: ignore[method-assign, assignment]
