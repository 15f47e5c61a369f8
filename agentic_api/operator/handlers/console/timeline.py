"""A session's timeline: one row per turn, each explained against the turn it could have
reused (the admin timeline's presenters), with its latency."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentic_api.operator.handlers.admin.timeline import present_timeline, present_turn
from agentic_api.operator.handlers.admin.views import tenant_view
from agentic_api.operator.queries.admin import AdminRepository, ConversationRecord, TurnRecord
from agentic_api.operator.queries.console import ConsoleRepository
from agentic_api.operator.shapes.admin import AdminTenant, AdminTurn
from agentic_api.runtime import Runtime


@dataclass(frozen=True)
class Comparison:
    """Turns shown together with the turn the first of them is compared to: what the
    residency annotation (``operator/handlers/admin/residency.annotate_timeline``) takes."""

    shown: list[AdminTurn]
    rows: list[TurnRecord]
    before: TurnRecord | None


@dataclass(frozen=True)
class Timeline:
    tenant: AdminTenant
    session_id: str
    # A conversation's session lists the conversation's turns, as the admin timeline
    # does; any other session is a previous_response_id chain (forks included).
    kind: Literal["conversation", "chain"]
    conversation: ConversationRecord | None
    comparisons: list[Comparison]
    latencies: dict[str, float]
    has_more: bool

    @property
    def turns(self) -> list[AdminTurn]:
        return [turn for part in self.comparisons for turn in part.shown]


async def session_timeline(
    services: Runtime, tenant_id: str, session_id: str, *, after: str | None, limit: int
) -> Timeline | None:
    """A fixed number of statements whatever the page holds (tenant, conversation, turns,
    the turn before the page or the parents outside it, latencies)."""
    async with services.db.read() as session:
        admin = AdminRepository(session)
        repo = ConsoleRepository(session)
        tenant = await repo.tenant(tenant_id)
        if tenant is None:
            return None
        conversation = await admin.get_conversation(tenant_id, session_id)
        comparisons: list[Comparison]
        if conversation is not None:
            rows = list(
                await admin.conversation_turns(tenant_id, session_id, after=after, limit=limit)
            )
            more, rows = len(rows) > limit, rows[:limit]
            before = await admin.turn_before(tenant_id, session_id, rows[0].id) if rows else None
            comparisons = [Comparison(present_timeline(rows, before), rows, before)]
        else:
            rows = list(await repo.session_turns(tenant_id, session_id, after=after, limit=limit))
            more, rows = len(rows) > limit, rows[:limit]
            if not rows and after is None:
                return None
            comparisons = await _chain_comparisons(repo, tenant_id, rows)
        latencies = await repo.latencies([row.id for row in rows])
    return Timeline(
        tenant=tenant_view(tenant),
        session_id=session_id,
        kind="conversation" if conversation is not None else "chain",
        conversation=conversation,
        comparisons=comparisons,
        latencies=latencies,
        has_more=more,
    )


async def _chain_comparisons(
    repo: ConsoleRepository, tenant_id: str, rows: list[TurnRecord]
) -> list[Comparison]:
    """Each chain turn against its parent, as the admin lineage view compares them; the
    parents not on this page are read in one statement."""
    by_id = {row.id: row for row in rows}
    missing = [
        row.previous_response_id
        for row in rows
        if row.previous_response_id and row.previous_response_id not in by_id
    ]
    by_id.update(await repo.turns_by_id(tenant_id, missing))
    comparisons = []
    for row in rows:
        parent = by_id.get(row.previous_response_id) if row.previous_response_id else None
        comparisons.append(Comparison([present_turn(row, parent)], [row], parent))
    return comparisons
