"""The hand-off between a running turn and whoever is streaming it to a client.

The turn runs in its own task and publishes here; a client that goes away stops
reading but does not stop the turn (unless the operator chose to cancel on disconnect).

A deque and one waiting future rather than an ``asyncio.Queue``: every relayed event
passes here, and the queue's general machinery (its getters' list, its putters, its
``unfinished_tasks`` bookkeeping) was work per event for a hand-off with one reader.

A reader may also give the channel a way to write events to its client itself
(``write_directly``): while the reader waits with nothing left to take and the client
keeps up, the turn's own task writes each batch of events and the reader is not woken at
all. A batch is what one upstream chunk brought (the round calls ``flush`` at each
chunk's end, inside ``batched``), else what one step of the loop published. That wake —
a task step through the reader's frames and the ASGI ``send`` chain — was the largest
single piece of the relay's work per event (docs/benchmarks/streaming/README.md at commit 6a12cfe).
Whenever the client cannot take a write at once, the batch goes to the reader as before,
which waits for the client; the turn never does. Order is kept: a batch is written
directly only while the reader holds nothing, and anything else published meanwhile (a
close, a failure) first sends the batch on.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

_OPENED = object()
_CLOSED = object()

# An event as the turn published it: its type, its sequence number and its JSON (made
# once, for the client's stream and the turn's stored events alike). Not the event as a
# dict: a text delta is spliced as bytes (turns/runner/delta_splice.py) and never is one;
# a reader that needs the dict (the WebSocket's) parses the JSON.
Published = tuple[str, int, bytes]
# Writes a batch of events to the reader's client if that does not wait; False if it
# would (the client is slow, gone, or the response is not open for it).
DirectWrite = Callable[[list[Published]], bool]


class ReaderGone(Exception):
    """The client reading the channel went away (``TurnChannel.reader_gone``)."""


class TurnChannel:
    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        # The reader's wait for the next item, while it waits.
        self._waiter: asyncio.Future[None] | None = None
        # The close (or failure) seen while taking events that came before it.
        self._end: object | None = None
        self._gone = False
        self._direct: DirectWrite | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Events published since the last flush, to be written directly.
        self._batch: list[Published] = []
        # Whether the publisher calls ``flush`` itself (else a flush is scheduled at the
        # end of the loop's step: one more iteration of the loop per batch).
        self._flushed_by_publisher = False

    def write_directly(self, write: DirectWrite) -> None:
        """From now on, while the reader waits, batches of events go to ``write``."""
        self._direct = write
        # (Looked up once: each asyncio.get_running_loop() is a getpid() system call.)
        self._loop = asyncio.get_running_loop()

    @contextmanager
    def batched(self) -> Iterator[Callable[[], None]]:
        """Within the block the publisher ends each batch itself with the ``flush`` it
        is given; what is left is flushed on leaving."""
        self._flushed_by_publisher = True
        try:
            yield self.flush
        finally:
            self._flushed_by_publisher = False
            self.flush()

    def flush(self) -> None:
        """Sends the batch on now: to the client if it can take it, else to the reader."""
        if self._batch:
            self._send_batch()

    def _put(self, item: Any) -> None:
        if self._batch:
            # A close goes with the batch to the reader, so that it ends the body in the
            # same write as these events.
            self._send_batch(directly=item is not _CLOSED)
        self._items.append(item)
        self._wake_reader()

    def opened(self) -> None:
        self._put(_OPENED)

    def failed_to_open(self, error: BaseException) -> None:
        self._put(error)

    def publish(self, kind: str, sequence: int, data: bytes) -> None:
        """An event of type ``kind`` numbered ``sequence``; ``data``: its JSON, made once by
        the turn for every reader."""
        batch = self._batch
        if batch or (self._direct is not None and self._waiter is not None):
            if not batch and not self._flushed_by_publisher and self._loop is not None:
                self._loop.call_soon(self._send_batch)
            batch.append((kind, sequence, data))
            return
        self._put((kind, sequence, data))

    def _send_batch(self, directly: bool = True) -> None:
        batch = self._batch
        if not batch:
            return
        self._batch = []
        direct = self._direct
        # Still waiting (not woken since: a wake sends the batch on first).
        if directly and direct is not None and self._waiter is not None and direct(batch):
            return
        self._items.extend(batch)
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        self._put(_CLOSED)

    def reader_gone(self) -> None:
        """The reader's client left: its wait (now or next) raises ``ReaderGone``."""
        self._gone = True
        self._wake_reader()

    @property
    def closed(self) -> bool:
        """Whether the turn closed the channel and the reader has taken every event."""
        return self._end is _CLOSED

    async def _get(self) -> Any:
        items = self._items
        while not items:
            if self._gone:
                raise ReaderGone
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        if self._gone:
            raise ReaderGone
        return items.popleft()

    async def wait_opened(self) -> None:
        """Returns once the upstream accepted the request; raises what prevented it."""
        first = await self._get()
        if isinstance(first, BaseException):
            raise first
        if first is _CLOSED:
            raise RuntimeError("the turn ended before the upstream answered")
        assert first is _OPENED

    async def next_event(self) -> dict[str, Any] | None:
        """The next event as a dict (parsed from its JSON); None once closed."""
        published = await self._next()
        return None if published is None else orjson.loads(published[2])

    async def _next(self) -> Published | None:
        item: Any = self._end if self._end is not None else await self._get()
        if item is _CLOSED:
            self._end = item
            return None
        if isinstance(item, BaseException):
            raise item
        published: Published = item
        return published

    async def next_events(self) -> list[Published]:
        """Every event published by now, with its JSON (waiting for the first); empty once
        closed. A close that came right after them is taken too (``closed`` then says so),
        so that a reader can end its stream in the same write as its last events.

        A stream read this way is written in as few writes as the turn allows: when the
        server falls behind, the events that piled up go out in one write instead of one
        write (and one wake-up of the client) each."""
        first = await self._next()
        if first is None:
            return []
        events = [first]
        items = self._items
        while items:
            item = items.popleft()
            if item is _CLOSED or isinstance(item, BaseException):
                # Delivered after the events taken here, on the next call.
                self._end = item
                break
            events.append(item)
        return events
