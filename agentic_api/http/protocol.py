"""uvicorn's httptools protocol, sending a response's head and body in one write.

uvicorn writes the status line and headers as soon as the app starts its response, then
the body in a second write. Each write to a loopback socket wakes the client, which on a
small machine is a context switch to a process that can do nothing with headers alone;
for a plain JSON response (every non-streamed turn) that is a wasted round of scheduling
per request. Here a write that is exactly a response head is held back until the next
write (the body, normally in the same step of the app) and both go out together; if no
body follows within the same event-loop iteration (a stream that starts later), the head
is flushed on its own then. Nothing is reordered: a held head always goes first.

It also hands each request a ``DirectBody`` (scope extension ``DIRECT_BODY``): a way to
write the next chunk of a chunked response straight to the connection, which says no
when that would wait for the client (or the response is not a chunked one in progress).
A streamed turn writes its events through it from its own task, so the relay does not
wake the request's task and its ASGI ``send`` chain for every event
(``turns/runner/channel.py``); the response's start and end still go through ``send``, so
every middleware sees them as before.

And it keeps the ``Date`` header current itself: uvicorn refreshes it from its main loop,
once a second, which keeps an idle process waking; ``serve``'s own loop sleeps until it is
told to stop (``http/quiet_server.py``), and a request whose second differs from the
header's makes it anew.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from email.utils import formatdate
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

_HEAD_START = b"HTTP/"
_HEAD_END = b"\r\n\r\n"
DIRECT_BODY = "agentic.direct_body"


class CoalescingTransport:
    """A transport that holds a lone response head until the next write."""

    __slots__ = ("_flush_handle", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is not None:
            head = self._take_held()
            self._transport.write(head + bytes(data))
            return
        if isinstance(data, bytes) and data.startswith(_HEAD_START) and data.endswith(_HEAD_END):
            self._held = data
            self._flush_handle = self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def flush(self) -> None:
        if self._held is not None:
            self._transport.write(self._take_held())

    def _take_held(self) -> bytes:
        held, self._held = self._held, None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        assert held is not None
        return held

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class DirectBody:
    """Writes chunks of one request's chunked response, as its ``send`` would, but only
    when that needs no wait: ``write`` says False when the client has not drained what it
    was sent (``send`` would wait), has gone, or the response has not started, has ended
    or is not chunked."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle

    def write(self, body: bytes) -> bool:
        cycle = self._cycle
        if (
            not body
            or cycle.disconnected
            or cycle.flow.write_paused
            or not cycle.response_started
            or cycle.response_complete
            or not cycle.chunked_encoding
            or cycle.transport.is_closing()
        ):
            return False
        try:
            cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        except Exception:
            # A connection failing under us: the response's task has the rule for a client
            # that left; the turn (whose model has run) must never fail on its write.
            return False
        return True


# The second each server's Date header was made for.
_date_made_for: weakref.WeakKeyDictionary[ServerState, int] = weakref.WeakKeyDictionary()


def keep_date_current(state: ServerState, config: Config) -> None:
    """Remakes the server's default headers (as uvicorn's tick does) when their Date is
    not this second's: one clock read per request otherwise."""
    now = time.time()
    second = int(now)
    if _date_made_for.get(state) == second:
        return
    _date_made_for[state] = second
    date = [(b"date", formatdate(now, usegmt=True).encode())] if config.date_header else []
    state.default_headers = date + config.encoded_headers


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports implement asyncio.Transport without subclassing it.)
        wrapped: Any = CoalescingTransport(transport, self.loop)  # type: ignore[arg-type]
        super().connection_made(wrapped)

    def on_headers_complete(self) -> None:
        # Before uvicorn's handler: it hands the default headers to the request's cycle
        # (and a WebSocket upgrade to its handshake).
        keep_date_current(self.server_state, self.config)
        super().on_headers_complete()
        cycle = self.cycle
        # (An upgrade to a WebSocket made no cycle for this request.)
        if cycle is not None and cycle.scope is self.scope:
            # (ASGI types an extension's value as a dict; this one is an object of ours.)
            extensions: Any = self.scope.setdefault("extensions", {})
            extensions[DIRECT_BODY] = DirectBody(cycle)
