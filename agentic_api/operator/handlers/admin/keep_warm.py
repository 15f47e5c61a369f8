"""The keep-warm re-warms of each shown turn (``cache/keep_warm.py`` keeps them in this
process, as residency is kept), attached to the paused turn they warmed."""

from __future__ import annotations

from collections.abc import Iterable

from agentic_api.cache.keep_warm import KeepWarm, Rewarm
from agentic_api.operator.shapes.admin import AdminTurn
from agentic_api.operator.shapes.keep_warm import AdminRewarm


def annotate_rewarms(shown: Iterable[AdminTurn], policy: KeepWarm | None) -> None:
    if policy is None:
        return
    for turn in shown:
        records = policy.records(turn.lineage.session_id)
        turn.rewarms = [rewarm_view(r) for r in records if r.response_id == turn.id]


def rewarm_view(rewarm: Rewarm) -> AdminRewarm:
    return AdminRewarm(
        at=rewarm.at,
        reason=rewarm.reason,
        replica=rewarm.replica,
        resident_before=rewarm.resident_before,
        estimated_tokens=rewarm.estimated_tokens,
        pressure_checked=rewarm.pressure_checked,
        expected_return_at=rewarm.expected_return_at,
        outcome=rewarm.outcome,
        input_tokens=rewarm.input_tokens,
        cached_tokens=rewarm.cached_tokens,
        spent_tokens=rewarm.spent_tokens,
        next_cached_tokens=rewarm.next_cached_tokens,
        finished_at=rewarm.finished_at,
        error=rewarm.error,
    )
