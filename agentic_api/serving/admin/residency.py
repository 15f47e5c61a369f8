"""The admin residency views, built from the tracker's snapshots (``cache/residency``):
a conversation's or a response's session on each replica, and the timeline's cause."""

from __future__ import annotations

from collections.abc import Sequence

from agentic_api.cache.residency.attribution import (
    block_size_of,
    expected_cached,
    explain_miss,
)
from agentic_api.cache.residency.replica import Eviction
from agentic_api.cache.residency.tracker import ResidencyTracker, SessionOnReplica
from agentic_api.errors import NotFound
from agentic_api.services import Services
from agentic_api.storage.admin import TurnRecord
from agentic_api.storage.session_owners import SessionOwner, conversation_owner, response_owner
from agentic_api.wire.admin import AdminTurn
from agentic_api.wire.residency import (
    CoverageReset,
    ReplicaResidency,
    ResidencyEviction,
    SessionResidency,
    TurnResidency,
)
from lineage import mint_cache_salt


def session_residency(
    owner: SessionOwner, tracker: ResidencyTracker | None, secret: bytes
) -> SessionResidency:
    views = tracker.session(owner.session_id) if tracker is not None else []
    salt = mint_cache_salt(secret, owner.tenant_id, owner.salt_epoch)
    replicas = [_replica(view, salt) for view in views]
    return SessionResidency(
        session_id=owner.session_id,
        tenant_id=owner.tenant_id,
        conversation_id=owner.conversation_id,
        response_id=owner.response_id,
        tracking=tracker is not None,
        resident_tokens=sum(r.resident_tokens for r in replicas),
        replicas=replicas,
    )


def _replica(view: SessionOnReplica, tenant_salt: str) -> ReplicaResidency:
    return ReplicaResidency(
        replica=view.replica,
        connected=view.connected,
        resident_blocks=view.resident_blocks,
        resident_tokens=view.resident_tokens,
        block_size=view.block_size,
        first_stored_at=view.first_stored,
        last_stored_at=view.last_stored,
        # Compared here, never shown: a salt is a tenant's cache identity.
        salt_matches_tenant=(tenant_salt in view.salts) if view.salts else None,
        evictions=[_eviction(e) for e in view.evictions],
        coverage_since=view.coverage_since,
        coverage_resets=[
            CoverageReset(at=r.at, reason=r.reason, blocks=r.blocks) for r in view.resets
        ],
    )


def _eviction(eviction: Eviction) -> ResidencyEviction:
    return ResidencyEviction(
        at=eviction.at,
        blocks=eviction.blocks,
        tokens=eviction.tokens,
        idle_seconds=eviction.idle_seconds,
        before_resume=eviction.resumed,
    )


def annotate_timeline(
    shown: Sequence[AdminTurn],
    rows: Sequence[TurnRecord],
    before: TurnRecord | None,
    tracker: ResidencyTracker | None,
) -> None:
    """Adds the "prefix not resident" cause to each continuation that reused less than
    every full block of the turn before it, with nothing in it changed (a cache break
    explains itself). Pairs turns as ``present_timeline`` does."""
    if tracker is None or not rows:
        return
    views_by_session: dict[str, list[SessionOnReplica]] = {}
    previous = before
    for index, (turn, row) in enumerate(zip(shown, rows, strict=True)):
        following = rows[index + 1].created_at.timestamp() if index + 1 < len(rows) else None
        if previous is not None and not turn.cache_break.broken:
            views = views_by_session.get(row.session_id)
            if views is None:
                views = views_by_session[row.session_id] = tracker.session(row.session_id)
            turn.residency = _turn_residency(row, previous, views, following)
        if row.prefix_digest is not None:
            previous = row


def _turn_residency(
    row: TurnRecord,
    previous: TurnRecord,
    views: Sequence[SessionOnReplica],
    next_started: float | None,
) -> TurnResidency | None:
    block = block_size_of(views)
    if block is None or row.input_tokens is None or previous.input_tokens is None:
        return None
    expected = expected_cached(previous.input_tokens, row.input_tokens, block)
    cause = explain_miss(
        views,
        previous_started=previous.created_at.timestamp(),
        started=row.created_at.timestamp(),
        next_started=next_started,
        expected=expected,
        measured=row.cached_tokens or 0,
    )
    if cause is None:
        return None
    return TurnResidency(
        expected_cached_tokens=cause.expected,
        measured_cached_tokens=cause.measured,
        cause=cause.cause,
        replica=cause.replica,
        eviction=_eviction(cause.eviction) if cause.eviction else None,
        explanation=cause.explanation,
    )


async def conversation_residency(services: Services, conversation_id: str) -> SessionResidency:
    async with services.db.read() as session:
        owner = await conversation_owner(session, conversation_id)
    if owner is None:
        raise NotFound(f"No conversation with id '{conversation_id}'.", param="conversation_id")
    return session_residency(owner, services.residency, services.secret)


async def response_residency(services: Services, response_id: str) -> SessionResidency:
    async with services.db.read() as session:
        owner = await response_owner(session, response_id)
    if owner is None:
        raise NotFound(f"No response with id '{response_id}'.", param="response_id")
    return session_residency(owner, services.residency, services.secret)
