"""The placement decisions of each shown turn (``cache/placement_book.py`` keeps them in
this process, as residency is kept): every round of the turn, and the prewarms and
keep-warm re-warms of its continuation."""

from __future__ import annotations

from collections.abc import Iterable

from agentic_api.cache.placement_book import Placement, PlacementBook
from agentic_api.operator.shapes.admin import AdminTurn
from agentic_api.operator.shapes.placement import AdminPlacement, AdminPlacementCandidate


def annotate_placements(shown: Iterable[AdminTurn], book: PlacementBook | None) -> None:
    if book is None:
        return
    for turn in shown:
        records = book.decisions(turn.lineage.session_id)
        turn.placements = [placement_view(p) for p in records if p.response_id == turn.id]


def placement_view(placement: Placement) -> AdminPlacement:
    decision = placement.decision
    return AdminPlacement(
        at=placement.at,
        round=placement.round,
        purpose=placement.purpose,
        replica=decision.replica,
        reason=decision.reason,
        home=decision.home,
        candidates=[
            AdminPlacementCandidate(replica=name, resident_tokens=tokens)
            for name, tokens in decision.resident
        ],
    )
