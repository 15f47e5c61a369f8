"""Running a prepared turn: one upstream request (streamed and relayed, or one JSON
call), then committed. Turns in which the gateway runs tools take several rounds
(``turns/tool_loop.py``), compacting turns one summary request
(``turns/compaction.py``); all end through ``turns/finish.py``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentic_api.errors import ApiError
from agentic_api.metrics import TurnMeter
from agentic_api.services import Services
from agentic_api.turns.channel import TurnChannel
from agentic_api.turns.commit import commit_turn
from agentic_api.turns.compaction import run_compaction_turn
from agentic_api.turns.finish import (
    Emit,
    TurnFailed,
    complete_turn,
    fail_turn,
    pump,
    upstream_outcome_error,
)
from agentic_api.turns.prepare import PreparedTurn
from agentic_api.turns.relay import StreamRelay
from agentic_api.turns.render import streams_upstream
from agentic_api.turns.tokens import attach_tokens
from agentic_api.turns.tool_loop import run_tool_turn
from agentic_api.upstream.errors import UpstreamInterrupted
from agentic_api.wire.events import snapshot_event, terminal_event
from agentic_api.wire.items import to_item
from agentic_api.wire.response_object import (
    empty_usage,
    finish_response,
    normalize_usage,
    open_sampling,
)
from agentic_api.wire.status import CREATED

__all__ = ["TurnFailed", "run_turn", "run_without_model"]


async def run_turn(
    services: Services, turn: PreparedTurn, channel: TurnChannel | None = None
) -> dict[str, Any]:
    """Runs the turn to its end and returns the final Response object.

    Raises ``ApiError`` if the upstream refused the request before streaming (nothing
    is stored) and ``TurnFailed`` if it failed midway (the failure is stored).
    """
    relay = StreamRelay(turn.base, open_sampling(turn.request))
    record = turn.records_events
    events: list[dict[str, Any]] = []
    attach_tokens(services, turn)

    meter = TurnMeter(
        model=turn.request.model,
        tenant=turn.caller.tenant_id,
        history_items=len(turn.history),
        streaming=channel is not None,
    )

    def emit(event: dict[str, Any]) -> None:
        meter.event(event)
        if record:
            events.append(event)
        if channel is not None:
            channel.publish(event)

    residency = services.residency
    if residency is not None:
        # Before the upstream call: were the session's blocks evicted while it was idle?
        residency.turn_started(turn.lineage.session_id)
    try:
        if turn.compacts:
            return meter.finished(
                await run_compaction_turn(services, turn, relay, emit, events, meter, channel)
            )
        if turn.runs_tools:
            return meter.finished(
                await run_tool_turn(services, turn, relay, emit, events, meter, channel)
            )
        if not streams_upstream(turn.request):
            return meter.finished(await _run_unstreamed(services, turn, relay, emit, events, meter))
        accepted = False
        try:
            async with services.upstream.stream_response(turn.body, turn.headers) as stream:
                accepted = True
                if channel is not None:
                    channel.opened()
                failure = await pump(stream.events(), relay, _relay_as_is(relay, emit))
            meter.upstream_done()
        except ApiError as exc:
            if not accepted:
                if channel is not None:
                    channel.failed_to_open(exc)
                raise
            failure = exc
        # A stream that ended before its first event still opens before it fails.
        for event in relay.open_with({}):
            emit(event)
        if failure is None:
            failure = upstream_outcome_error(relay)
        if failure is not None:
            await fail_turn(services, turn, relay, emit, events, failure)
        return meter.finished(await _complete(services, turn, relay, emit, events))
    except TurnFailed as failed:
        meter.finished(failed.response)
        raise
    finally:
        meter.close()
        if residency is not None:
            residency.turn_finished(turn.lineage.session_id)
        if channel is not None:
            channel.close()


async def _run_unstreamed(
    services: Services,
    turn: PreparedTurn,
    relay: StreamRelay,
    emit: Callable[[dict[str, Any]], None],
    events: list[dict[str, Any]],
    meter: TurnMeter,
) -> dict[str, Any]:
    """One JSON request and one JSON answer, for clients that wait for the whole object."""
    try:
        relay.upstream_final = await services.upstream.create_response(turn.body, turn.headers)
        meter.upstream_done()
    except UpstreamInterrupted as exc:
        meter.upstream_done()
        # The request reached the model server and was lost on the way back: the turn
        # happened, and failed.
        await fail_turn(services, turn, relay, emit, events, exc)
    failure = upstream_outcome_error(relay)
    if failure is not None:
        await fail_turn(services, turn, relay, emit, events, failure)
    return await _complete(services, turn, relay, emit, events)


def _relay_as_is(relay: StreamRelay, emit: Emit) -> Callable[[dict[str, Any]], None]:
    def handle(event: dict[str, Any]) -> None:
        for opening in relay.open_with(event):
            emit(opening)
        ours = relay.translate(event)
        if ours is not None:
            emit(ours)

    return handle


async def _complete(
    services: Services,
    turn: PreparedTurn,
    relay: StreamRelay,
    emit: Emit,
    events: list[dict[str, Any]],
) -> dict[str, Any]:
    upstream = relay.upstream_final or {}
    output = relay.final_output()
    return await complete_turn(
        services,
        turn,
        relay,
        emit,
        events,
        status="incomplete" if upstream.get("status") == "incomplete" else "completed",
        output=output,
        model_output=[to_item(item) for item in output],
        usage=normalize_usage(upstream.get("usage")),
        upstream=upstream,
        incomplete_details=upstream.get("incomplete_details"),
    )


async def run_without_model(services: Services, turn: PreparedTurn) -> list[dict[str, Any]]:
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
        await commit_turn(
            services.db, turn, final, [], [created, completed], histories=services.histories
        )
    return [created, completed]
