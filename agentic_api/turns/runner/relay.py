"""Translates the upstream's event stream into ours: our response id, our item ids
(stable between the stream and the stored object), our sequence numbers.

A turn that runs tools takes several upstream rounds; each round numbers its items from
0, so ``start_round`` shifts the next round's output indices past the items the client
has already been shown.
"""

from __future__ import annotations

from typing import Any

from agentic_api.upstream.token_fields import MissingTokens, ReportedTokens, take_reported_tokens
from agentic_api.wire.events import (
    CREATED,
    ERROR,
    IN_PROGRESS,
    SNAPSHOT_EVENTS,
    UPSTREAM_TERMINAL_EVENTS,
    snapshot_event,
)
from agentic_api.wire.items import id_kind_for
from agentic_api.wire.reasoning_seal import sealed_reasoning
from agentic_api.wire.response_object import output_item, output_part, streamed_item, with_sampling
from lineage import IdKind, mint_id

# Most of every stream's events (one per token).
TEXT_DELTA = "response.output_text.delta"


class StreamRelay:
    """``open_sampling``: the sampling fields the client left open; the relay adopts the
    model server's values for them from its first snapshot (or its final object), so
    every object shown after that, snapshots included, carries what was applied.

    ``learned``: the model's values for them from earlier turns (shared, per model, and
    updated here from every answer). When it holds every open field, the stream need not
    wait for the upstream's first event to tell them: ``open_known`` opens it at once."""

    def __init__(
        self,
        base: dict[str, Any],
        open_sampling: tuple[str, ...] = (),
        learned: dict[str, float] | None = None,
        *,
        seal_reasoning: bool = False,
    ) -> None:
        self.base = base
        # include: reasoning.encrypted_content (wire/reasoning_seal.py).
        self.seal_reasoning = seal_reasoning
        self.open_sampling = open_sampling
        self.learned: dict[str, float] = {} if learned is None else learned
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

    def next_sequence(self) -> int:
        """Takes the next sequence number, for an event stamped as bytes."""
        number = self._next_sequence
        self._next_sequence += 1
        return number

    def shown_item_id(self, index: int) -> str | None:
        """Our id of this round's item ``index``, once an event about it was relayed."""
        return self._ids_by_index.get(index)

    def release(self, event: dict[str, Any]) -> None:
        """Gives back the number of the last stamped event when it will not be sent, so
        the stream's sequence numbers stay contiguous."""
        if event.get("sequence_number") == self._next_sequence - 1:
            self._next_sequence -= 1

    def adopt_sampling(self, upstream: Any) -> None:
        """Takes the sampling values the model server applied (see the class), and
        learns them as the model's. Every answer is the truth for the object that ends
        the turn: a stream opened with learned values that the model server no longer
        applies (its defaults changed) ends with what it applied."""
        if self.open_sampling:
            applied = with_sampling({}, upstream, self.open_sampling)
            self.learned.update(applied)
            self.base = {**self.base, **applied} if applied else self.base

    @property
    def sampling_known(self) -> bool:
        """Whether every sampling field the client left open has a learned value."""
        learned = self.learned
        return all(key in learned for key in self.open_sampling)

    def open_known(self) -> list[dict[str, Any]]:
        """Our opening events before the upstream's first event (``sampling_known``):
        the learned values stand in for the ones its snapshot would tell."""
        if self.opened:
            return []
        self.base = with_sampling(self.base, self.learned, self.open_sampling)
        return self.opening_events()

    def opening_events(self) -> list[dict[str, Any]]:
        self.opened = True
        snapshot = {**self.base, "status": "in_progress"}
        return [
            self.stamp(snapshot_event(CREATED, snapshot)),
            self.stamp(snapshot_event(IN_PROGRESS, snapshot)),
        ]

    def open_with(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """Our opening events, once, when the upstream's first event arrives (its
        snapshot, when it starts with one, tells the sampling it applied)."""
        if self.opened:
            return []
        if event.get("type") in SNAPSHOT_EVENTS:
            self.adopt_sampling(event.get("response"))
        return self.opening_events()

    def translate(self, event: dict[str, Any], *, stamp: bool = True) -> dict[str, Any] | None:
        """Our version of an upstream event, or None when it is ours to emit (snapshots,
        terminal events) rather than to relay. ``stamp=False`` leaves the sequence number
        to whoever may still drop or rewrite the event."""
        kind = event.get("type")
        if kind == TEXT_DELTA:
            delta = self._text_delta(event)
            if delta is not None:
                return self.stamp(delta) if stamp else delta
        if not isinstance(kind, str):
            return None
        if kind in SNAPSHOT_EVENTS:
            response = event.get("response")
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                self.upstream_response_id = response["id"]
            return None
        if kind in UPSTREAM_TERMINAL_EVENTS:
            response = event.get("response")
            self.upstream_final = response if isinstance(response, dict) else {}
            return None
        if kind == ERROR:
            self.upstream_error = event
            return None
        # dict.copy, not copy.copy: the generic dispatch was ~1% of the server under load.
        ours = event.copy()
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
                shown = {**item, "id": our_id}
                done = kind == "response.output_item.done"
                ours["item"] = self._finished(shown) if done else streamed_item(shown)
            if "item_id" in ours:
                ours["item_id"] = our_id
            ours["output_index"] = index + self.offset
        elif isinstance(event.get("item_id"), str):
            known = self._index_by_upstream_id.get(event["item_id"])
            if known is not None:
                ours["item_id"] = self._ids_by_index[known]
        if "part" in ours:
            ours["part"] = output_part(ours["part"])
        if kind in ("response.output_text.delta", "response.output_text.done") and not isinstance(
            ours.get("logprobs"), list
        ):
            ours["logprobs"] = []
        if kind.endswith(".delta"):
            self.first_token_seen = True
        return self.stamp(ours) if stamp else ours

    def _text_delta(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """``translate`` of the bulk of every stream, a text delta of an item this round
        has already shown, without the general dispatch (the same event the general path
        makes, key order included: tests/unit/test_relay_fast_path.py); None for any
        delta that path must see (an item not yet shown, fields a delta does not carry)."""
        index = event.get("output_index")
        if type(index) is not int or "item" in event or "part" in event or "response_id" in event:
            return None
        our_id = self._ids_by_index.get(index)
        if our_id is None:
            return None
        upstream_id = event.get("item_id")
        if isinstance(upstream_id, str):
            self._index_by_upstream_id.setdefault(upstream_id, index)
        self.first_token_seen = True
        return ours_for_delta(event, our_id, index + self.offset)

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
            result.append(self._finished({**item, "id": our_id}))
        return result

    def _finished(self, item: dict[str, Any]) -> dict[str, Any]:
        """A finished output item, as it is shown and stored."""
        shown = output_item(item)
        return sealed_reasoning(shown) if self.seal_reasoning else shown


def ours_for_delta(event: dict[str, Any], our_id: str, output_index: int) -> dict[str, Any]:
    """Our version of a text delta of a shown item (unstamped): the upstream's members in
    their order, our item id and output index in place, logprobs always a list."""
    ours = event.copy()
    ours.pop("sequence_number", None)
    if "item_id" in ours:
        ours["item_id"] = our_id
    ours["output_index"] = output_index
    if not isinstance(ours.get("logprobs"), list):
        ours["logprobs"] = []
    return ours
