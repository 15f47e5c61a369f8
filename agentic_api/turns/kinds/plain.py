"""The plain turn: one upstream round, whose output is the turn's, as the client sees it
and as it is stored."""

from __future__ import annotations

from typing import Any

from agentic_api.turns.runner.finish import Completion, Ending
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.round import upstream_round
from agentic_api.wire.items import to_item
from agentic_api.wire.response_object import normalize_usage


async def run_plain_turn(run: TurnInProgress) -> Ending:
    relay, emit = run.relay, run.emit
    show_start = run.show_start

    def relay_as_is(event: dict[str, Any]) -> None:
        if not relay.opened:
            show_start(event)
        ours = relay.translate(event)
        if ours is not None:
            emit(ours)

    failure = await upstream_round(run, run.turn.body, relay_as_is, relays_as_is=True)
    if failure is not None:
        return failure
    upstream = relay.upstream_final or {}
    output = relay.final_output()
    return Completion(
        status="incomplete" if upstream.get("status") == "incomplete" else "completed",
        output=output,
        model_output=[to_item(item) for item in output],
        usage=normalize_usage(upstream.get("usage")),
        upstream=upstream,
        incomplete_details=upstream.get("incomplete_details"),
    )
