"""Running a prepared turn: its rounds upstream (``turns/round.py``), then its commit
(``turns/finish.py``). A plain turn takes one round; turns in which the gateway runs
tools take several (``turns/tool_loop.py``), compacting turns one summary request
(``turns/compaction.py``). All share one ``TurnInProgress``."""

from __future__ import annotations

import time
from typing import Any

from agentic_api.errors import ApiError
from agentic_api.services import Services
from agentic_api.turns.kinds.compaction import run_compaction_turn
from agentic_api.turns.kinds.tool_loop import run_tool_turn
from agentic_api.turns.prepare.turn import PreparedTurn
from agentic_api.turns.runner.channel import TurnChannel
from agentic_api.turns.runner.commit import commit_turn
from agentic_api.turns.runner.finish import TurnFailed, complete_turn
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.turns.runner.round import upstream_round
from agentic_api.turns.runner.tokens import attach_tokens
from agentic_api.wire.events import snapshot_event, terminal_event
from agentic_api.wire.items import to_item
from agentic_api.wire.response_object import empty_usage, finish_response, normalize_usage
from agentic_api.wire.status import CREATED

__all__ = ["TurnFailed", "run_turn", "run_without_model"]


async def run_turn(
    services: Services, turn: PreparedTurn, channel: TurnChannel | None = None
) -> dict[str, Any]:
    """Runs the turn to its end and returns the final Response object.

    Raises ``ApiError`` if it was refused before it began (nothing is stored; a
    ``channel`` gets the refusal as ``failed_to_open``) and ``TurnFailed`` if it failed
    after (the failure is stored).
    """
    attach_tokens(services, turn)
    run = TurnInProgress(services, turn, channel)
    residency = services.residency
    if residency is not None:
        # Before the upstream call: were the session's blocks evicted while it was idle?
        residency.turn_started(turn.lineage.session_id)
    try:
        if turn.compacts:
            final = await run_compaction_turn(run)
        elif turn.runs_tools:
            final = await run_tool_turn(run)
        else:
            final = await _run_plain(run)
        return run.meter.finished(final)
    except TurnFailed as failed:
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


async def _run_plain(run: TurnInProgress) -> dict[str, Any]:
    """One round; its output is the turn's, as the client sees it and as it is stored."""
    relay, emit = run.relay, run.emit
    show_start = run.show_start

    def relay_as_is(event: dict[str, Any]) -> None:
        if not relay.opened:
            show_start(event)
        ours = relay.translate(event)
        if ours is not None:
            emit(ours)

    await upstream_round(run, run.turn.body, relay_as_is)
    upstream = relay.upstream_final or {}
    output = relay.final_output()
    return await complete_turn(
        run,
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
