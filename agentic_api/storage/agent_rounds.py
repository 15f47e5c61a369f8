"""Queries over ``agent_rounds``: the agents' token accounts of multi-agent responses.
Tenant-scoped reads; nothing here commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import AgentRoundRow, Response


@dataclass(frozen=True)
class AgentRound:
    """One agent's model round, as the multi-agent turn records it."""

    agent_name: str
    parent_agent: str | None
    round: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    shared_prefix_tokens: int | None = None
    expected_cached: int | None = None


class AgentRoundRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def insert(self, tenant_id: str, response_id: str, rounds: Sequence[AgentRound]) -> None:
        if not rounds:
            return
        connection = await self.session.connection()
        await connection.execute(
            insert(AgentRoundRow),
            [
                {
                    "response_id": response_id,
                    "tenant_id": tenant_id,
                    "agent_name": r.agent_name,
                    "parent_agent": r.parent_agent,
                    "round": r.round,
                    "input_tokens": r.input_tokens,
                    "cached_tokens": r.cached_tokens,
                    "output_tokens": r.output_tokens,
                    "shared_prefix_tokens": r.shared_prefix_tokens,
                    "expected_cached": r.expected_cached,
                }
                for r in rounds
            ],
        )

    async def any_for(self, tenant_id: str, response_id: str) -> bool:
        """Whether ``response_id`` is a multi-agent response (its agents' rounds are kept)."""
        query = (
            select(AgentRoundRow.round)
            .where(AgentRoundRow.response_id == response_id, AgentRoundRow.tenant_id == tenant_id)
            .limit(1)
        )
        return (await self.session.execute(query)).first() is not None

    async def for_response(self, tenant_id: str, response_id: str) -> list[AgentRound]:
        query = (
            select(AgentRoundRow)
            .where(AgentRoundRow.response_id == response_id, AgentRoundRow.tenant_id == tenant_id)
            .order_by(AgentRoundRow.agent_name, AgentRoundRow.round)
        )
        return [
            AgentRound(
                row.agent_name,
                row.parent_agent,
                row.round,
                row.input_tokens,
                row.cached_tokens,
                row.output_tokens,
                row.shared_prefix_tokens,
                row.expected_cached,
            )
            for row in (await self.session.execute(query)).scalars()
        ]

    async def subagent_responses(self, tenant_id: str, response_id: str) -> dict[str, str]:
        """The responses of ``response_id``'s subagents, by agent name."""
        query = select(Response.agent_name, Response.id).where(
            Response.spawned_by == response_id, Response.tenant_id == tenant_id
        )
        return {
            name: own_id
            for name, own_id in (await self.session.execute(query)).all()
            if name is not None
        }
