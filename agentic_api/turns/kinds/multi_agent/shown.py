"""What the client sees of a multi-agent tree: its ``output``, in the order things
happened, every item streamed as it is decided.

Most items are decided whole (an agent's message, an action and its result, a message
between agents): added and done at once. A call of an MCP tool is announced before the
gateway runs it and settled after, with the events the single-agent tool loop streams
(``wire.mcp``: added ``in_progress``, ``mcp_call.in_progress``, its arguments; then
``mcp_call.completed`` / ``.failed`` and done), at one output index, while the rest of the
tree goes on showing its own items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentic_api.wire.mcp import (
    call_finished_events,
    call_started_events,
    item_added,
    item_done,
)


class TreeOutput:
    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        # ``send`` stamps and emits one event in the response's stream.
        self.send = send
        self.items: list[dict[str, Any]] = []

    def publish(self, item: dict[str, Any]) -> None:
        """An item decided whole (attributed already)."""
        index = self._add(item)
        self.send(item_added(index, item))
        self.send(item_done(index, item))

    def start_call(self, item: dict[str, Any]) -> int:
        """An ``mcp_call`` about to run (``in_progress``); returns its output index."""
        index = self._add(item)
        for event in call_started_events(index, item):
            self.send(event)
        return index

    def finish_call(self, index: int, item: dict[str, Any]) -> None:
        """The ``mcp_call`` at ``index`` as it ended (ran, failed, or not run)."""
        self.items[index] = item
        for event in call_finished_events(index, item):
            self.send(event)

    def _add(self, item: dict[str, Any]) -> int:
        self.items.append(item)
        return len(self.items) - 1
