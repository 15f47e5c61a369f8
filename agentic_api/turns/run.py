"""Running a prepared turn: its kind's rounds upstream (``turns/kinds/``: the plain
turn's one round, the tool loop's several, compaction's summary request), then its end
(``turns/runner/finish.py:end_turn``, the one place a turn ends, committed or failed).
All share one ``TurnInProgress``. A turn is run and awaited (``run_turn``) or streamed to
a client from a task of its own (``TurnStream``, at the end of this module)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any

from agentic_api import tracing
from agentic_api.errors import ApiError
from agentic_api.runtime import Runtime
from agentic_api.turns.data.commit_steps import NO_HOOKS, CommitHooks
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.kinds.compaction import run_compaction_turn
from agentic_api.turns.kinds.multi_agent.turn import run_multi_agent_turn
from agentic_api.turns.kinds.plain import run_plain_turn
from agentic_api.turns.kinds.threshold_compaction import passes_threshold, run_threshold_compaction
from agentic_api.turns.kinds.tool_loop import run_tool_turn
from agentic_api.turns.prepare.summary_request import compact_threshold
from agentic_api.turns.runner.channel import TurnChannel
from agentic_api.turns.runner.finish import TurnFailed, as_stored, commit_turn, end_turn
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.injections import Injections
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.turns.runner.tokens import attach_tokens
from agentic_api.wire.events import CREATED, snapshot_event, terminal_event
from agentic_api.wire.response_object import empty_usage, finish_response

__all__ = ["TurnFailed", "begin_turn", "run_begun", "run_turn", "run_without_model"]


def run_turn(
    services: Runtime,
    turn: PreparedTurn,
    channel: TurnChannel | None = None,
    *,
    hooks: CommitHooks = NO_HOOKS,
) -> Coroutine[Any, Any, dict[str, Any]]:
    """Runs the turn to its end (await it) and returns the final Response object.

    Raises ``ApiError`` if it was refused before it began (nothing is stored; a
    ``channel`` gets the refusal as ``failed_to_open``) and ``TurnFailed`` if it failed
    after (the failure is stored). ``hooks``: what its commit runs besides storing it.
    The turn begins (its token plan attached) when this is called; the coroutine is
    ``run_begun``'s own, so running it costs no extra level of calls.
    """
    return run_begun(begin_turn(services, turn, channel, hooks=hooks))


def begin_turn(
    services: Runtime,
    turn: PreparedTurn,
    channel: TurnChannel | None = None,
    *,
    hooks: CommitHooks = NO_HOOKS,
    injections: Injections | None = None,
) -> TurnInProgress:
    """The turn about to be sent: its token plan attached (which may bind its fingerprint
    and ask for ids in its body) and its in-progress state, for ``run_begun``."""
    turn, tokens = attach_tokens(services, turn)
    return TurnInProgress(
        services, turn, channel, hooks=hooks, tokens=tokens, injections=injections
    )


async def run_begun(run: TurnInProgress) -> dict[str, Any]:
    """``run_turn``'s work, for a turn whose in-progress state its caller keeps."""
    turn, channel = run.turn, run.channel
    # The turn's attributes go on the span it runs under: its request's server span, or
    # its background job's.
    traced = tracing.current()
    tracing.record_request(
        traced,
        turn.request.model,
        turn.request.conversation_id or turn.lineage.session_id,
        kind=tracing.TURN_KIND,
    )
    tracing.record_turn(traced, session_id=turn.lineage.session_id)
    residency = run.services.residency
    if residency is not None:
        # Before the upstream call: were the session's blocks evicted while it was idle?
        residency.turn_started(turn.lineage.session_id)
    keep_warm = run.services.keep_warm
    if keep_warm is not None:
        # The agent is back: its session needs no keeping warm (a re-warm is cancelled).
        keep_warm.turn_started(turn.lineage.session_id)
    try:
        # Counted before anything is sent: a count that fails refuses the turn unrun.
        threshold = (
            None
            if turn.compacts or turn.runs_tools or turn.request.runs_agents
            else compact_threshold(turn.request)
        )
        over = threshold is not None and await passes_threshold(run.services, turn, threshold)
        async with run.held:
            if turn.request.runs_agents:
                ending = await run_multi_agent_turn(run)
            elif turn.compacts:
                ending = await run_compaction_turn(run)
            elif over:
                ending = await run_threshold_compaction(run)
            elif turn.runs_tools:
                ending = await run_tool_turn(run)
            else:
                ending = await run_plain_turn(run)
            final = await end_turn(run, ending)
        if keep_warm is not None:
            keep_warm.turn_finished(
                session_id=turn.lineage.session_id,
                response_id=turn.response_id,
                tenant_id=turn.caller.tenant_id,
                salt_epoch=turn.caller.salt_epoch,
                cache_salt=turn.caller.cache_salt,
                request=turn.request,
                final=final,
            )
        tracing.record_response(traced, final)
        return run.meter.finished(final)
    except TurnFailed as failed:
        tracing.record_response(traced, failed.response)
        run.meter.finished(failed.response)
        raise
    except ApiError as exc:
        run.refused(exc)
        raise
    finally:
        run.meter.close()
        if residency is not None:
            residency.turn_finished(turn.lineage.session_id)
        if channel is not None:
            channel.close()


async def run_without_model(services: Runtime, turn: PreparedTurn) -> list[dict[str, Any]]:
    """``generate: false``: record the turn's input as a checkpoint to chain from, without
    calling the model. Returns the events to send (created, then completed)."""
    relay = StreamRelay(turn.base)
    created = relay.stamp(snapshot_event(CREATED, dict(turn.base)))
    final = finish_response(
        turn.base,
        status="completed",
        output=[],
        usage=empty_usage(),
        completed_at=int(time.time()),
    )
    completed = relay.stamp(terminal_event(final))
    if turn.request.store:
        stored = [as_stored(created), as_stored(completed)]
        await commit_turn(services.db, turn, final, [], stored, histories=services.histories)
    return [created, completed]


# A streamed turn: it runs in a task of its own and its client reads its events.

# The turn must outlive its client (a client that leaves does not stop a turn whose model
# is already working, and whose commit it will find on retrieval), so it runs in a task
# ``Runtime.spawn`` tracks and drains on shutdown, publishing to a ``TurnChannel``. The
# handle owns that task and channel, the wait for the upstream's acceptance (before
# which a refusal is still a plain error), and the disconnect rule
# (``AGENTIC_STREAM_DISCONNECT``: ``cancel`` stops the turn when its reader leaves,
# ``complete`` lets it finish). HTTP's SSE and the WebSocket read it the same way::

#     next_event = stream.next_event
#     with stream:  # leaving the block early (the client went away) applies the rule
#         while (event := await next_event()) is not None:
#             ...


Work = Coroutine[Any, Any, dict[str, Any]]

# Wraps the turn's run in what must last exactly as long (an Idempotency-Key's hold).
Guard = Callable[[Work], Work]


class TurnStream:
    def __init__(
        self,
        services: Runtime,
        turn: PreparedTurn,
        guard: Guard | None,
        hooks: CommitHooks = NO_HOOKS,
        injections: Injections | None = None,
    ) -> None:
        self.channel = TurnChannel()
        # The channel's own method, so that reading an event costs no extra call.
        self.next_event = self.channel.next_event
        self.cancel_on_disconnect = services.settings.stream_disconnect == "cancel"
        # What the turn wrote while it ran (what the model saw, once it completed).
        self.run = begin_turn(services, turn, self.channel, hooks=hooks, injections=injections)
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
    services: Runtime,
    turn: PreparedTurn,
    *,
    guard: Guard | None = None,
    hooks: CommitHooks = NO_HOOKS,
    injections: Injections | None = None,
) -> TurnStream:
    """Starts the turn; returns once the upstream accepted it (raises its refusal).
    ``injections``: where the client's tool outputs arrive while it runs."""
    stream = TurnStream(services, turn, guard, hooks, injections)
    await stream.wait_opened()
    return stream
