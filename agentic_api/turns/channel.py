"""The hand-off between a running turn and whoever is streaming it to a client.

The turn runs in its own task and publishes here; a client that goes away stops
reading but does not stop the turn (unless the operator chose to cancel on disconnect).
"""

from __future__ import annotations

import asyncio
from typing import Any

_OPENED = object()
_CLOSED = object()


class TurnChannel:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()

    def opened(self) -> None:
        self._queue.put_nowait(_OPENED)

    def failed_to_open(self, error: BaseException) -> None:
        self._queue.put_nowait(error)

    def publish(self, event: dict[str, Any]) -> None:
        self._queue.put_nowait(event)

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
        item = await self._queue.get()
        if item is _CLOSED:
            return None
        if isinstance(item, BaseException):
            raise item
        event: dict[str, Any] = item
        return event
