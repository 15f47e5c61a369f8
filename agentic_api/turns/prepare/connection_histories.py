"""Connection-local histories: the latest unstored response of each WebSocket lane, kept
in memory so ``store: false`` chains can continue within one connection. (A stored
response is continued from storage, as over HTTP: its row says whether it still may be.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentic_api.wire.items import Item, to_item
from lineage import ExecutionFingerprint


@dataclass(frozen=True)
class LaneHistory:
    response_id: str
    model: str
    session_id: str
    depth: int
    fingerprint: ExecutionFingerprint
    stored: bool
    # The full model-visible history through this response's output, as sent upstream.
    items: tuple[Item, ...]
    # What of storage the history holds: the latest stored response it continued and the
    # conversation it began in. Once either is deleted or purged the history is not
    # continued (serving/socket_turn.py checks before each continuation).
    stored_ancestor: str | None = None
    conversation_id: str | None = None


class ConnectionHistories:
    """Latest response per lane; any lane's latest response can be continued by id."""

    def __init__(self) -> None:
        self._by_lane: dict[str, LaneHistory] = {}

    def get(self, response_id: str) -> LaneHistory | None:
        for checkpoint in self._by_lane.values():
            if checkpoint.response_id == response_id:
                return checkpoint
        return None

    def remember(self, lane: str, checkpoint: LaneHistory) -> None:
        self._by_lane[lane] = checkpoint

    def forget_lane(self, lane: str) -> None:
        self._by_lane.pop(lane, None)

    def evict(self, response_id: str) -> None:
        for lane, checkpoint in list(self._by_lane.items()):
            if checkpoint.response_id == response_id:
                del self._by_lane[lane]


def lane_history_after(
    *,
    response_id: str,
    model: str,
    session_id: str,
    depth: int,
    fingerprint: ExecutionFingerprint,
    stored: bool,
    prompt: Sequence[Item],
    output: Sequence[dict[str, Any]],
    stored_ancestor: str | None = None,
    conversation_id: str | None = None,
) -> LaneHistory:
    return LaneHistory(
        response_id=response_id,
        model=model,
        session_id=session_id,
        depth=depth,
        fingerprint=fingerprint,
        stored=stored,
        items=(*prompt, *(to_item(item) for item in output)),
        stored_ancestor=stored_ancestor,
        conversation_id=conversation_id,
    )
