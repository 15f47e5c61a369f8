"""Client tool outputs injected into a running response (the beta WebSocket's
``response.inject``): an agent of a multi-agent tree that called a client function waits
here for its output while the rest of the tree goes on.

The connection hands the client's items to ``deliver`` (which refuses, changing nothing,
unless every item answers a call some agent waits for); the waiting agent takes them with
``wait``. Acknowledging the injection in the response's own stream
(``response.inject.created``) is the caller's ``on_accepted``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

# Items a client answers a call of its own with.
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})


class InjectionRefused(Exception):
    """The injected input does not answer calls this response waits for."""


class Injections:
    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.on_accepted: Callable[[], None] = lambda: None

    def expect(self, call_id: str) -> None:
        """A call was shown to the client: its output may be injected from now on."""
        if call_id not in self._waiting:
            self._waiting[call_id] = asyncio.get_running_loop().create_future()

    async def wait(self, call_id: str) -> dict[str, Any]:
        """The client's output item for ``call_id`` (``expect`` it first)."""
        return await self._waiting[call_id]

    def deliver(self, items: list[Any]) -> None:
        """Hands the client's outputs to the agents waiting for them, all or none."""
        if not items:
            raise InjectionRefused("'input' must hold at least one tool output.")
        answered: list[tuple[asyncio.Future[dict[str, Any]], dict[str, Any]]] = []
        for index, item in enumerate(items):
            if not isinstance(item, dict) or item.get("type") not in OUTPUT_TYPES:
                raise InjectionRefused(
                    f"input[{index}] must be a function_call_output or custom_tool_call_output."
                )
            call_id = item.get("call_id")
            future = self._waiting.get(call_id) if isinstance(call_id, str) else None
            if future is None or future.done():
                raise InjectionRefused(
                    f"input[{index}]: no agent of this response waits for call_id {call_id!r}."
                )
            answered.append((future, item))
        for future, item in answered:
            future.set_result(item)
        self.on_accepted()
