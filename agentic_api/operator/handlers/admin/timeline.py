"""How stored turns are explained in the admin timeline and lineage views.

Pure presentation of stored facts: the fingerprint changes the turn pipeline recorded,
plus a history check over the stored item counts (see ``history_edited``). It reads turns
through the ``TurnFacts`` protocol, so it can be tested on any row-like object.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from agentic_api.operator.handlers.admin.token_account import account_view
from agentic_api.operator.shapes.admin import (
    AdminTurn,
    CacheBreak,
    CacheChange,
    LineageNode,
    TurnFingerprint,
    TurnLineage,
    TurnUsage,
    hit_ratio,
)
from lineage import ExecutionFingerprint


class TurnFacts(Protocol):
    """What a stored turn must expose to be shown (storage's TurnRecord fits)."""

    @property
    def id(self) -> str: ...
    @property
    def previous_response_id(self) -> str | None: ...
    @property
    def fingerprint(self) -> dict[str, Any]: ...
    @property
    def fingerprint_changes(self) -> list[dict[str, Any]]: ...
    @property
    def prefix_digest(self) -> str | None: ...
    @property
    def history_item_count(self) -> int: ...
    @property
    def input_item_count(self) -> int: ...
    @property
    def output_item_count(self) -> int: ...
    @property
    def conversation_position(self) -> int | None: ...


HISTORY_EDITED = "history edited"


def history_edited(turn: TurnFacts, previous: TurnFacts) -> bool | None:
    """Whether ``turn``'s history is not an extension of ``previous``'s; None if unknown.

    The rule, over stored counts only (the items themselves may since have been deleted):
    a continuable turn records ``history_item_count`` = items it saw before its input +
    its input + its output. Extending ``previous`` means it saw exactly what ``previous``
    saw, plus whatever was appended in between. Conversation positions are never reused,
    so "appended in between" is the gap between the end of ``previous``'s items and the
    start of ``turn``'s. Any other count means items were removed (or inserted): edited.
    Without positions (a ``previous_response_id`` chain) the gap is 0; if only one side
    has one, we can only say items went missing when fewer were seen than before.
    Failed turns record no history (no prefix digest), so nothing can be said about them.
    """
    if turn.prefix_digest is None or previous.prefix_digest is None:
        return None
    seen_before_input = turn.history_item_count - turn.input_item_count - turn.output_item_count
    if turn.conversation_position is not None and previous.conversation_position is not None:
        previous_end = (
            previous.conversation_position + previous.input_item_count + previous.output_item_count
        )
        appended = turn.conversation_position - previous_end
        return seen_before_input != previous.history_item_count + appended
    if turn.conversation_position is None and previous.conversation_position is None:
        return seen_before_input != previous.history_item_count
    return seen_before_input < previous.history_item_count


def fingerprint_changes(turn: TurnFacts, previous: TurnFacts) -> list[CacheChange]:
    """The stored changes when ``previous`` is the turn's recorded parent (they were
    computed against it at commit); otherwise (a conversation's previous turn) the same
    diff, recomputed from both stored fingerprints."""
    if turn.previous_response_id == previous.id:
        return [CacheChange(**change) for change in turn.fingerprint_changes]
    try:
        now = ExecutionFingerprint.from_dict(turn.fingerprint)
        before = ExecutionFingerprint.from_dict(previous.fingerprint)
    except ValueError:
        return [CacheChange(**change) for change in turn.fingerprint_changes]
    return [CacheChange(component=c.component, description=c.description) for c in now.diff(before)]


def explain(turn: TurnFacts, previous: TurnFacts | None) -> CacheBreak:
    if previous is None:
        return CacheBreak(
            compared_to=None,
            broken=False,
            changes=[],
            explanation="First turn: there was no earlier prefix to reuse.",
        )
    changes = fingerprint_changes(turn, previous)
    if history_edited(turn, previous):
        changes.append(
            CacheChange(
                component="history",
                description=f"{HISTORY_EDITED}: items the previous turn saw are gone or moved",
            )
        )
    if not changes:
        return CacheBreak(
            compared_to=previous.id,
            broken=False,
            changes=[],
            explanation=(
                "No cache break: same execution config, and the history extends the previous "
                "turn's, so its prefix could be reused."
            ),
        )
    reasons = _join([change.description for change in changes])
    return CacheBreak(
        compared_to=previous.id,
        broken=True,
        changes=changes,
        explanation=f"Cache reuse was not possible because {reasons}.",
    )


def _join(parts: Sequence[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


class TurnView(TurnFacts, Protocol):
    @property
    def session_id(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def deleted_at(self) -> datetime | None: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def fingerprint_digest(self) -> str: ...
    @property
    def conversation_id(self) -> str | None: ...
    @property
    def token_account(self) -> dict[str, Any] | None: ...


def present_turn(turn: TurnView, previous: TurnView | None) -> AdminTurn:
    return AdminTurn(
        id=turn.id,
        created_at=int(turn.created_at.timestamp()),
        status=turn.status,
        model=turn.model,
        deleted=turn.deleted_at is not None,
        usage=TurnUsage(
            input_tokens=turn.input_tokens,
            cached_tokens=turn.cached_tokens,
            output_tokens=turn.output_tokens,
            hit_ratio=hit_ratio(turn.input_tokens, turn.cached_tokens),
        ),
        lineage=TurnLineage(
            session_id=turn.session_id,
            continuation_id=turn.id,
            parent=turn.previous_response_id,
            depth=turn.depth,
            conversation_id=turn.conversation_id,
        ),
        fingerprint=TurnFingerprint(digest=turn.fingerprint_digest, components=turn.fingerprint),
        cache_break=explain(turn, previous),
        tokens=account_view(turn.token_account) if turn.token_account else None,
    )


def present_timeline(turns: Sequence[TurnView], before: TurnView | None) -> list[AdminTurn]:
    """A conversation's turns in order, each compared to the latest earlier turn that left
    a history (``before`` is that turn for the first one, from an earlier page).

    "In order" is id order, the order the turns started. A conversation's committed turns
    are serialised by its version check, and a turn mints its id just before it reads
    the conversation, so start order is commit order.
    """
    shown: list[AdminTurn] = []
    previous = before
    for turn in turns:
        shown.append(present_turn(turn, previous))
        if turn.prefix_digest is not None:
            previous = turn
    return shown


def present_chain(turns: Sequence[TurnView]) -> list[AdminTurn]:
    """A ``previous_response_id`` chain, root first: each turn compared to its parent."""
    return [present_turn(turn, turns[i - 1] if i else None) for i, turn in enumerate(turns)]


def present_tree(root: TurnView, descendants: Sequence[TurnView]) -> list[LineageNode]:
    """The descendants of ``root`` as a tree (breadth-first input, so parents come first)."""
    by_id: dict[str, TurnView] = {root.id: root}
    nodes: dict[str, LineageNode] = {}
    top: list[LineageNode] = []
    for turn in descendants:
        parent_id = turn.previous_response_id or ""
        node = LineageNode(**present_turn(turn, by_id.get(parent_id)).model_dump(), children=[])
        by_id[turn.id] = turn
        nodes[turn.id] = node
        if parent_id == root.id:
            top.append(node)
        elif parent_id in nodes:
            nodes[parent_id].children.append(node)
    return top
