"""Translates the upstream's event stream into ours: our response id, our item ids
(stable between the stream and the stored object), our sequence numbers.

A turn that runs tools takes several upstream rounds; each round numbers its items from
0, so ``start_round`` shifts the next round's output indices past the items the client
has already been shown.
"""

from __future__ import annotations

import copy
from typing import Any

from agentic_api.upstream.token_fields import MissingTokens, ReportedTokens, take_reported_tokens
from agentic_api.wire.items import id_kind_for
from lineage import IdKind, mint_id

_SNAPSHOT_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def replayable(item: dict[str, Any]) -> dict[str, Any]:
    """An output item in a form the model server accepts back as history.

    vLLM 0.32 sometimes answers with an assistant message whose ``content`` is empty, and
    its own renderer fails (HTTP 500) when that message is replayed. We fix the item once,
    before anyone sees or stores it, so the stream, the stored object and every later
    replay stay identical: one empty ``output_text`` part, which renders as no text.
    """
    if item.get("type") == "message" and item.get("content") == []:
        return {**item, "content": [{"type": "output_text", "text": "", "annotations": []}]}
    return item


class StreamRelay:
    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base
        self.response_id: str = base["id"]
        self._next_sequence = 0
        self._ids_by_index: dict[int, str] = {}
        self._index_by_upstream_id: dict[str, int] = {}
        self._upstream_final: dict[str, Any] | None = None
        # Each upstream round's exact token ids (or why there are none), in round order.
        self.token_rounds: list[ReportedTokens | MissingTokens] = []
        self.upstream_error: dict[str, Any] | None = None
        self.upstream_response_id: str | None = None
        self.first_token_seen = False
        self.opened = False
        # Output index in our response of the upstream round's item 0.
        self.offset = 0

    @property
    def upstream_final(self) -> dict[str, Any] | None:
        return self._upstream_final

    @upstream_final.setter
    def upstream_final(self, final: dict[str, Any] | None) -> None:
        """Every round's final object passes here (JSON or streamed): its engine-only
        token fields are taken out before anything reads it."""
        if final is not None:
            self.token_rounds.append(take_reported_tokens(final))
        self._upstream_final = final

    def start_round(self, offset: int) -> None:
        """Forget the previous round (its ids, its final object) before the next one."""
        self.offset = offset
        self._ids_by_index = {}
        self._index_by_upstream_id = {}
        self.upstream_final = None
        self.upstream_error = None

    def stamp(self, event: dict[str, Any]) -> dict[str, Any]:
        event["sequence_number"] = self._next_sequence
        self._next_sequence += 1
        return event

    def opening_events(self) -> list[dict[str, Any]]:
        self.opened = True
        snapshot = {**self.base, "status": "in_progress"}
        return [
            self.stamp({"type": "response.created", "response": snapshot}),
            self.stamp({"type": "response.in_progress", "response": snapshot}),
        ]

    def translate(self, event: dict[str, Any], *, stamp: bool = True) -> dict[str, Any] | None:
        """Our version of an upstream event, or None when it is ours to emit (snapshots,
        terminal events) rather than to relay. ``stamp=False`` leaves the sequence number
        to whoever may still drop or rewrite the event."""
        kind = event.get("type")
        if not isinstance(kind, str):
            return None
        if kind in _SNAPSHOT_EVENTS:
            response = event.get("response")
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                self.upstream_response_id = response["id"]
            return None
        if kind in TERMINAL_EVENTS:
            response = event.get("response")
            self.upstream_final = response if isinstance(response, dict) else {}
            return None
        if kind == "error":
            self.upstream_error = event
            return None
        ours = copy.copy(event)
        ours.pop("sequence_number", None)
        if "response_id" in ours:
            ours["response_id"] = self.response_id
        index = event.get("output_index")
        item = event.get("item")
        if isinstance(index, int):
            item_type = item.get("type") if isinstance(item, dict) else None
            our_id = self._id_for(index, item_type, event.get("item_id"))
            if isinstance(item, dict):
                if isinstance(item.get("id"), str):
                    self._index_by_upstream_id[item["id"]] = index
                ours["item"] = replayable({**item, "id": our_id})
            if "item_id" in ours:
                ours["item_id"] = our_id
            ours["output_index"] = index + self.offset
        elif isinstance(event.get("item_id"), str):
            known = self._index_by_upstream_id.get(event["item_id"])
            if known is not None:
                ours["item_id"] = self._ids_by_index[known]
        if kind.endswith(".delta"):
            self.first_token_seen = True
        return self.stamp(ours) if stamp else ours

    def _id_for(self, index: int, item_type: Any, upstream_id: Any) -> str:
        if index not in self._ids_by_index:
            kind = id_kind_for(item_type) if isinstance(item_type, str) else IdKind.ITEM
            self._ids_by_index[index] = mint_id(kind)
        if isinstance(upstream_id, str):
            self._index_by_upstream_id.setdefault(upstream_id, index)
        return self._ids_by_index[index]

    def final_output(self) -> list[dict[str, Any]]:
        """The upstream's final output items with our ids, matched by position."""
        output = (self.upstream_final or {}).get("output") or []
        result: list[dict[str, Any]] = []
        for index, item in enumerate(output):
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                continue
            our_id = self._id_for(index, item["type"], item.get("id"))
            result.append(replayable({**item, "id": our_id}))
        return result
