"""uvicorn's httptools protocol, sending a response's head and body in one write.

uvicorn writes the status line and headers as soon as the app starts its response, then
the body in a second write. Each write to a loopback socket wakes the client, which on a
small machine is a context switch to a process that can do nothing with headers alone;
for a plain JSON response (every non-streamed turn) that is a wasted round of scheduling
per request. Here a write that is exactly a response head is held back until the next
write (the body, normally in the same step of the app) and both go out together; if no
body follows within the same event-loop iteration (a stream that starts later), the head
is flushed on its own then. Nothing is reordered: a held head always goes first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_HEAD_START = b"HTTP/"
_HEAD_END = b"\r\n\r\n"


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


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports implement asyncio.Transport without subclassing it.)
        wrapped: Any = CoalescingTransport(transport, self.loop)  # type: ignore[arg-type]
        super().connection_made(wrapped)
