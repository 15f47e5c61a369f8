"""A WebSocket turn (``response.create`` on a lane), from its parsed request to what the
connection sends, and what the connection keeps of it.

Each lane keeps its latest unstored response's whole history
(``turns/prepare/connection_histories.py``) so that ``store: false`` chains continue within
the connection: a turn that completes replaces it; one that fails, or that cannot be
prepared, forgets the response it continued (its history is no longer what the client's next
turn would build on). A stored turn is not kept: its continuation reads its row, as over
HTTP, so a deleted or purged response is refused at once, by every process. A kept history
is continued only while what it holds of storage (the stored response it continued, the
conversation it began in) is still there, checked against storage before each
continuation; otherwise the connection answers as a fresh one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentic_api.errors import ApiError
from agentic_api.runtime import Runtime
from agentic_api.storage.conversations import ConversationRepository
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.data.prepared import PreparedTurn

# ConnectionHistories is named again for the WebSocket route, which keeps one per connection.
from agentic_api.turns.prepare.connection_histories import (
    ConnectionHistories as ConnectionHistories,
)
from agentic_api.turns.prepare.connection_histories import (
    LaneHistory,
    lane_history_after,
)
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.turns.prewarm import run_prewarm
from agentic_api.turns.run import TurnFailed, TurnStream, open_stream, run_without_model

# Named again for the WebSocket route, which hands response.inject frames to them.
from agentic_api.turns.runner.injections import InjectionRefused as InjectionRefused
from agentic_api.turns.runner.injections import Injections as Injections
from agentic_api.wire.events import CONTINUABLE_STATUSES
from agentic_api.wire.multi_agent import check_concurrency
from agentic_api.wire.requests import CreateResponseRequest


@dataclass(frozen=True)
class SocketTurn:
    """A lane's turn under way: read ``stream`` to its end, then ``settle``."""

    stream: TurnStream
    histories: ConnectionHistories
    lane: str
    # The kept history the turn continued, if it continued one.
    base: LaneHistory | None
    # Where the client's response.inject frames go while the turn runs.
    injections: Injections | None = None

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
            _remember(self.histories, self.lane, turn, self.base, output)


async def start_socket_turn(
    services: Runtime,
    caller: Caller,
    request: CreateResponseRequest,
    *,
    histories: ConnectionHistories,
    lane: str,
    generate: bool,
) -> list[dict[str, Any]] | SocketTurn:
    """The turn, its upstream request accepted; or with ``generate: false`` the events
    of the turn recorded without the model (already kept for the lane); or for a prewarm
    (which overrides ``generate``, as OpenAI documents) its events: the lane keeps
    nothing of it, since nothing can continue it."""
    check_concurrency(request.multi_agent, services.settings.multi_agent_max_concurrent)
    base = await _kept_base(services, caller.tenant_id, histories, request)
    try:
        turn = await prepare_turn(services, caller, request, local=histories)
    except ApiError:
        _forget_parent(histories, request)
        raise
    if request.prewarms:
        return (await run_prewarm(services, turn)).events
    if not generate:
        events = await run_without_model(services, turn)
        _remember(histories, lane, turn, base, [])
        return events
    # A multi-agent response waits for the client's tool outputs (response.inject).
    injections = Injections() if request.runs_agents else None
    stream = await open_stream(services, turn, injections=injections)
    return SocketTurn(stream, histories, lane, base, injections)


async def _kept_base(
    services: Runtime,
    tenant_id: str,
    histories: ConnectionHistories,
    request: CreateResponseRequest,
) -> LaneHistory | None:
    """The kept history ``request`` continues, if it may still be continued; one that
    holds a response or conversation deleted (or purged) since is forgotten, so the turn
    is prepared as on a fresh connection."""
    if request.previous_response_id is None or request.conversation_id is not None:
        return None
    base = histories.get(request.previous_response_id)
    if base is None or await _storage_still_holds(services, tenant_id, base):
        return base
    histories.evict(base.response_id)
    return None


async def _storage_still_holds(services: Runtime, tenant_id: str, base: LaneHistory) -> bool:
    ancestor = base.stored_ancestor
    if ancestor is not None and await services.db.turns.checkpoint(tenant_id, ancestor) is None:
        return False
    if base.conversation_id is not None:
        async with services.db.read() as session:
            return await ConversationRepository(session).exists(tenant_id, base.conversation_id)
    return True


def _forget_parent(histories: ConnectionHistories, request: CreateResponseRequest) -> None:
    if request.previous_response_id:
        histories.evict(request.previous_response_id)


def _remember(
    histories: ConnectionHistories,
    lane: str,
    turn: PreparedTurn,
    base: LaneHistory | None,
    output: list[dict[str, Any]],
) -> None:
    if turn.request.store:
        # Continued from its row; the lane's older unstored history is not its latest.
        histories.forget_lane(lane)
        return
    if turn.parent is not None:
        # Continued a stored response (or a conversation's head) read from storage.
        stored_ancestor: str | None = turn.parent.id
        conversation_id = turn.conversation_id
    elif base is not None:
        stored_ancestor, conversation_id = base.stored_ancestor, base.conversation_id
    else:
        stored_ancestor, conversation_id = None, turn.conversation_id
    histories.remember(
        lane,
        lane_history_after(
            response_id=turn.response_id,
            model=turn.request.model,
            session_id=turn.lineage.session_id,
            depth=turn.lineage.depth,
            fingerprint=turn.fingerprint,
            stored=False,
            prompt=turn.prompt_items,
            output=output,
            stored_ancestor=stored_ancestor,
            conversation_id=conversation_id,
        ),
    )
