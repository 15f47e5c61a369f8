"""A streamed turn: it runs in a task of its own and its client reads its events.

The turn must outlive its client (a client that leaves does not stop a turn whose model
is already working, and whose commit it will find on retrieval), so it runs in a task
``Services.spawn`` tracks and drains on shutdown, publishing to a ``TurnChannel``. The
handle owns that task and channel, the wait for the upstream's acceptance (before
which a refusal is still a plain error), and the disconnect rule
(``AGENTIC_STREAM_DISCONNECT``: ``cancel`` stops the turn when its reader leaves,
``complete`` lets it finish). HTTP's SSE and the WebSocket read it the same way::

    next_event = stream.next_event
    with stream:  # leaving the block early (the client went away) applies the rule
        while (event := await next_event()) is not None:
            ...
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any

from agentic_api.runtime import Services
from agentic_api.turns.data.commit_steps import NO_HOOKS, CommitHooks
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.run import begin_turn, run_begun
from agentic_api.turns.runner.channel import TurnChannel

Work = Coroutine[Any, Any, dict[str, Any]]
# Wraps the turn's run in what must last exactly as long (an Idempotency-Key's hold).
Guard = Callable[[Work], Work]


class TurnStream:
    def __init__(
        self,
        services: Services,
        turn: PreparedTurn,
        guard: Guard | None,
        hooks: CommitHooks = NO_HOOKS,
    ) -> None:
        self.channel = TurnChannel()
        # The channel's own method, so that reading an event costs no extra call.
        self.next_event = self.channel.next_event
        self.cancel_on_disconnect = services.settings.stream_disconnect == "cancel"
        # What the turn wrote while it ran (what the model saw, once it completed).
        self.run = begin_turn(services, turn, self.channel, hooks=hooks)
        work = run_begun(self.run)
        self.task: asyncio.Task[dict[str, Any]] = services.spawn(
            work if guard is None else guard(work)
        )

    async def wait_opened(self) -> None:
        """Returns once the upstream accepted the turn; raises what prevented it, once
        the task has ended (so what it held, an Idempotency-Key, is released before the
        client can retry)."""
        try:
            await self.channel.wait_opened()
        except BaseException:
            await asyncio.wait({self.task})
            raise

    async def result(self) -> dict[str, Any]:
        """The final Response object; raises ``TurnFailed`` (stored) or ``ApiError``."""
        return await self.task

    def __enter__(self) -> TurnStream:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Leaving on an exception means the reader went away before the end.
        if kind is not None and self.cancel_on_disconnect and not self.task.done():
            self.task.cancel()


async def open_stream(
    services: Services,
    turn: PreparedTurn,
    *,
    guard: Guard | None = None,
    hooks: CommitHooks = NO_HOOKS,
) -> TurnStream:
    """Starts the turn; returns once the upstream accepted it (raises its refusal)."""
    stream = TurnStream(services, turn, guard, hooks)
    await stream.wait_opened()
    return stream
