"""Why a continuation found less of its prefix cached than its history allowed.

Given what the replicas reported for the session (``tracker.SessionOnReplica``) and two
consecutive turns, the missing reuse is put down to, in this order: an eviction of the
session's blocks between the two turns (the one that took the most tokens), a reset of a
replica's coverage in that window (restart, cache cleared, lost events), the two turns
having been served by different replicas (each replica's stores name the session), or
nothing seen (this process heard no cause: it may have started later, or a router may
have sent the turn somewhere it does not listen to).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from agentic_api.cache.residency.replica import Eviction, Reset
from agentic_api.cache.residency.tracker import SessionOnReplica

# Removals that arrive this soon after a turn started still predate its prefill lookup
# (events travel after the engine step that caused them).
_SLACK_SECONDS = 1.0


Cause = Literal["evicted", "replica_reset", "other_replica", "not_seen"]


@dataclass(frozen=True)
class MissCause:
    expected: int
    measured: int
    cause: Cause
    replica: str | None
    eviction: Eviction | None
    explanation: str


def expected_cached(previous_input_tokens: int, input_tokens: int, block_size: int) -> int:
    """Every full block of the previous prompt, capped by what vLLM reuses of this one
    (it always recomputes the last prompt token)."""
    if input_tokens <= 0:
        return 0
    reusable = ((input_tokens - 1) // block_size) * block_size
    return min((previous_input_tokens // block_size) * block_size, reusable)


def block_size_of(views: Sequence[SessionOnReplica]) -> int | None:
    return next((view.block_size for view in views if view.block_size), None)


def explain_miss(
    views: Sequence[SessionOnReplica],
    *,
    previous_started: float,
    started: float,
    next_started: float | None,
    expected: int,
    measured: int,
) -> MissCause | None:
    """None when the turn reused what it could (``measured >= expected``)."""
    if measured >= expected:
        return None
    lost = expected - measured
    until = started + _SLACK_SECONDS
    evictions = [
        (view.replica, eviction)
        for view in views
        for eviction in view.evictions
        if previous_started <= eviction.at <= until
    ]
    if evictions:
        replica, eviction = max(evictions, key=lambda pair: (pair[1].tokens, pair[1].at))
        idle = (
            f", after it had been idle {eviction.idle_seconds:.0f} s"
            if eviction.idle_seconds is not None
            else ", while one of its turns was running"
        )
        return MissCause(
            expected,
            measured,
            "evicted",
            replica,
            eviction,
            f"Prefix not resident: {replica} evicted {eviction.blocks} blocks "
            f"({eviction.tokens} tokens) of this session at {_when(eviction.at)}{idle}; "
            f"this turn reused {measured} of {expected} expected tokens ({lost} recomputed).",
        )
    resets: list[tuple[str, Reset]] = [
        (view.replica, reset)
        for view in views
        for reset in view.resets
        if previous_started <= reset.at <= until
    ]
    if resets:
        replica, reset = max(resets, key=lambda pair: pair[1].at)
        return MissCause(
            expected,
            measured,
            "replica_reset",
            replica,
            None,
            f"Prefix not resident: {replica}'s cache coverage was reset ({reset.reason}) at "
            f"{_when(reset.at)}, between the two turns; this turn reused {measured} of "
            f"{expected} expected tokens.",
        )
    before = _served(views, previous_started, started)
    now = _served(views, started, next_started)
    if before and now and not before & now:
        return MissCause(
            expected,
            measured,
            "other_replica",
            ", ".join(sorted(now)),
            None,
            f"Prefix not resident on the replica that served this turn: the previous turn "
            f"stored its blocks on {', '.join(sorted(before))}, this one on "
            f"{', '.join(sorted(now))}; it reused {measured} of {expected} expected tokens.",
        )
    return MissCause(
        expected,
        measured,
        "not_seen",
        None,
        None,
        f"Prefix not resident: this turn reused {measured} of {expected} expected tokens, "
        "but no replica reported removing this session's blocks to this server process "
        "(it only knows what it heard since it started).",
    )


def _served(views: Sequence[SessionOnReplica], start: float, end: float | None) -> set[str]:
    return {
        view.replica
        for view in views
        if any(start <= at and (end is None or at < end) for at in view.store_times)
    }


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
