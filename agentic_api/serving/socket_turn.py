"""A WebSocket turn (``response.create`` on a lane), from its parsed request to what the
connection sends, and what the connection keeps of it.

Each lane keeps its latest response's whole history (``turns/prepare/connection_histories.py``)
so that ``store: false`` chains continue within the connection: a turn that completes
replaces it; one that fails, or that cannot be prepared, forgets the response it
continued (its history is no longer what the client's next turn would build on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentic_api.errors import ApiError
from agentic_api.services import Services
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.prepare.connection_histories import ConnectionHistories, lane_history_after
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.turns.run import TurnFailed, run_without_model
from agentic_api.turns.stream import TurnStream, open_stream
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.status import CONTINUABLE_STATUSES


@dataclass(frozen=True)
class SocketTurn:
    """A lane's turn under way: read ``stream`` to its end, then ``settle``."""

    stream: TurnStream
    histories: ConnectionHistories
    lane: str

    async def settle(self) -> None:
        """Waits for the turn's end and keeps what the lane continues from."""
        # The turn as it was sent (its fingerprint bound to the upstream's tokenizer).
        turn = self.stream.run.turn
        try:
            final = await self.stream.result()
        except (TurnFailed, ApiError):
            _forget_parent(self.histories, turn.request)
            return
        if final["status"] in CONTINUABLE_STATUSES:
            # What the model saw, which differs from the client's output when tools ran.
            seen = self.stream.run.model_output
            output = final["output"] if seen is None else [item.as_dict() for item in seen]
            _remember(self.histories, self.lane, turn, output)


async def start_socket_turn(
    services: Services,
    caller: Caller,
    request: CreateResponseRequest,
    *,
    histories: ConnectionHistories,
    lane: str,
    generate: bool,
) -> list[dict[str, Any]] | SocketTurn:
    """The turn, its upstream request accepted; or with ``generate: false`` the events
    of the turn recorded without the model (already kept for the lane)."""
    try:
        turn = await prepare_turn(services, caller, request, local=histories)
    except ApiError:
        _forget_parent(histories, request)
        raise
    if not generate:
        events = await run_without_model(services, turn)
        _remember(histories, lane, turn, [])
        return events
    return SocketTurn(await open_stream(services, turn), histories, lane)


def _forget_parent(histories: ConnectionHistories, request: CreateResponseRequest) -> None:
    if request.previous_response_id:
        histories.evict(request.previous_response_id)


def _remember(
    histories: ConnectionHistories, lane: str, turn: PreparedTurn, output: list[dict[str, Any]]
) -> None:
    histories.remember(
        lane,
        lane_history_after(
            response_id=turn.response_id,
            model=turn.request.model,
            session_id=turn.lineage.session_id,
            depth=turn.lineage.depth,
            fingerprint=turn.fingerprint,
            stored=turn.request.store,
            prompt=turn.prompt_items,
            output=output,
        ),
    )
