"""The hand-off between a running turn and whoever is streaming it to a client.

The turn runs in its own task and publishes here; a client that goes away stops
reading but does not stop the turn (unless the operator chose to cancel on disconnect).
"""

from __future__ import annotations

import asyncio
from typing import Any

_OPENED = object()
_CLOSED = object()

# An event as the turn published it, and its JSON: serialized once, for the client's
# stream and the turn's stored events alike.
Published = tuple[dict[str, Any], bytes]


class TurnChannel:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        # The close (or failure) seen while taking events that came before it.
        self._end: object | None = None

    def opened(self) -> None:
        self._queue.put_nowait(_OPENED)

    def failed_to_open(self, error: BaseException) -> None:
        self._queue.put_nowait(error)

    def publish(self, event: dict[str, Any], data: bytes) -> None:
        """``data``: the event's JSON, serialized once by the turn for every reader."""
        self._queue.put_nowait((event, data))

    def close(self) -> None:
        self._queue.put_nowait(_CLOSED)

    async def wait_opened(self) -> None:
        """Returns once the upstream accepted the request; raises what prevented it."""
        first = await self._queue.get()
        if isinstance(first, BaseException):
            raise first
        if first is _CLOSED:
            raise RuntimeError("the turn ended before the upstream answered")
        assert first is _OPENED

    async def next_event(self) -> dict[str, Any] | None:
        published = await self._next()
        return None if published is None else published[0]

    async def _next(self) -> Published | None:
        item: Any = self._end if self._end is not None else await self._queue.get()
        if item is _CLOSED:
            self._end = item
            return None
        if isinstance(item, BaseException):
            raise item
        published: Published = item
        return published

    async def next_events(self) -> list[Published]:
        """Every event published by now, with its JSON (waiting for the first); empty once
        closed.

        A stream read this way is written in as few writes as the turn allows: when the
        server falls behind, the events that piled up go out in one write instead of one
        write (and one wake-up of the client) each."""
        first = await self._next()
        if first is None:
            return []
        events = [first]
        queue = self._queue
        while not queue.empty():
            item = queue.get_nowait()
            if item is _CLOSED or isinstance(item, BaseException):
                # Delivered after the events taken here, on the next call.
                self._end = item
                break
            events.append(item)
        return events
