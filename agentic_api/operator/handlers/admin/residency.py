"""The admin residency views, built from the tracker's snapshots (``cache/residency``):
a session's tally per replica, a response's own branch (how much of its prompt + output
each replica holds, matched by its token ids), and the timeline's cause."""

from __future__ import annotations

from array import array
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.cache.accounting import block_floor
from agentic_api.cache.codec import ArtifactCorrupt, unpack_ids
from agentic_api.cache.recent import RecentArtifacts
from agentic_api.cache.residency.attribution import (
    block_size_of,
    expected_cached,
    explain_miss,
)
from agentic_api.cache.residency.replica import Eviction
from agentic_api.cache.residency.tracker import ResidencyTracker, SessionOnReplica
from agentic_api.errors import NotFound
from agentic_api.operator.queries.admin import TurnRecord
from agentic_api.operator.shapes.admin import AdminTurn
from agentic_api.operator.shapes.residency import (
    BranchOnReplica,
    BranchResidency,
    CoverageReset,
    ReplicaResidency,
    ResidencyEviction,
    SessionResidency,
    TurnResidency,
)
from agentic_api.runtime import Runtime
from agentic_api.storage.session_owners import SessionOwner, conversation_owner, response_owner
from agentic_api.storage.token_artifacts import TokenArtifactRepository
from lineage import mint_cache_salt


def session_residency(
    owner: SessionOwner,
    tracker: ResidencyTracker | None,
    secret: bytes,
    branch_tokens: array[int] | str | None,
) -> SessionResidency:
    """``branch_tokens``: the branch response's prompt + output ids (``branch_tokens``), or
    why there are none; None when there is no branch to show."""
    views = tracker.session(owner.session_id) if tracker is not None else []
    # The tenant's current salt: the one its next continuation is sent with.
    salt = mint_cache_salt(secret, owner.tenant_id, owner.salt_epoch)
    replicas = [_replica(view, salt) for view in views]
    branch = None
    if tracker is not None and owner.branch_response_id is not None and branch_tokens is not None:
        branch = branch_residency(owner.branch_response_id, branch_tokens, tracker, salt)
    return SessionResidency(
        session_id=owner.session_id,
        tenant_id=owner.tenant_id,
        conversation_id=owner.conversation_id,
        response_id=owner.response_id,
        tracking=tracker is not None,
        resident_tokens=sum(r.resident_tokens for r in replicas),
        replicas=replicas,
        branch=branch,
    )


async def branch_tokens(
    session: AsyncSession, recent: RecentArtifacts, tenant_id: str, response_id: str
) -> array[int] | str:
    """The response's exact prompt + output ids (what a continuation extends), from this
    process's recent artifacts or the stored ones; a string says why there are none."""
    kept = recent.get(tenant_id, response_id)
    if kept is not None:
        return kept.prompt + kept.output
    row = await TokenArtifactRepository(session).get(tenant_id, response_id)
    if row is None:
        return (
            "the response has no token ids (token artifacts off, not reported by the "
            "upstream, made without the model, or expired)"
        )
    try:
        tokens = unpack_ids(row.prompt_ids, row.prompt_count, row.encoding)
        tokens.extend(unpack_ids(row.output_ids, row.output_count, row.encoding))
    except ArtifactCorrupt as exc:
        return f"the response's token ids are unreadable: {exc}"
    return tokens


def branch_residency(
    response_id: str, tokens: array[int] | str, tracker: ResidencyTracker, salt: str
) -> BranchResidency:
    if isinstance(tokens, str):
        return BranchResidency(
            response_id=response_id,
            available=False,
            reason=tokens,
            tokens=None,
            resident_tokens=0,
            replica=None,
            replicas=[],
        )
    replicas = [
        BranchOnReplica(
            replica=found.replica,
            connected=found.connected,
            block_size=found.block_size,
            resident_tokens=found.resident_tokens if found.known else None,
            known_tokens=found.resident_tokens,
            reusable_tokens=(
                block_floor(len(tokens) - 1, found.block_size) if found.block_size else None
            ),
            coverage_since=found.coverage_since,
        )
        for found in tracker.prefix(tokens, salt)
    ]
    best = max(replicas, key=lambda r: r.known_tokens, default=None)
    holds = best is not None and best.known_tokens > 0
    # The most held is known when every figure is, or when one holds all it can.
    known = all(r.resident_tokens is not None for r in replicas) or any(
        r.reusable_tokens is not None and r.known_tokens >= r.reusable_tokens for r in replicas
    )
    return BranchResidency(
        response_id=response_id,
        available=True,
        reason=None,
        tokens=len(tokens),
        resident_tokens=(best.known_tokens if best is not None else 0) if known else None,
        replica=best.replica if holds and best is not None else None,
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
    expected = _expected(row, previous, row.input_tokens, previous.input_tokens, block)
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


def _expected(
    row: TurnRecord, previous: TurnRecord, input_tokens: int, previous_input_tokens: int, block: int
) -> int:
    """The turn's token account's expected cached tokens when it was made against
    ``previous`` (the parent's prompt + output, token by token: one figure for the account
    and this cause); without one, every full block of the previous prompt."""
    account = row.token_account or {}
    figure = account.get("expected_cached")
    if (
        account.get("status") in ("exact", "diverged")
        and account.get("parent_id") == previous.id
        and isinstance(figure, int)
    ):
        return figure
    return expected_cached(previous_input_tokens, input_tokens, block)


async def conversation_residency(services: Runtime, conversation_id: str) -> SessionResidency:
    return await _residency(services, conversation_owner, "conversation", conversation_id)


async def response_residency(services: Runtime, response_id: str) -> SessionResidency:
    return await _residency(services, response_owner, "response", response_id)


async def _residency(
    services: Runtime,
    owner_of: Callable[[AsyncSession, str], Awaitable[SessionOwner | None]],
    kind: str,
    object_id: str,
) -> SessionResidency:
    """The residency of the session that owns the conversation or response ``object_id``
    (``owner_of`` finds it); a 404 naming ``kind`` when there is none."""
    async with services.db.read() as session:
        owner = await owner_of(session, object_id)
        tokens = await _branch(session, services, owner)
    if owner is None:
        raise NotFound(f"No {kind} with id '{object_id}'.", param=f"{kind}_id")
    return session_residency(owner, services.residency, services.secret, tokens)


async def _branch(
    session: AsyncSession, services: Runtime, owner: SessionOwner | None
) -> array[int] | str | None:
    """The branch response's token ids, read only when there is something to match."""
    if owner is None or owner.branch_response_id is None or services.residency is None:
        return None
    return await branch_tokens(
        session, services.artifacts, owner.tenant_id, owner.branch_response_id
    )
