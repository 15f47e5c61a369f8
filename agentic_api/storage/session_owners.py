"""Whose session is it: the tenant (and its salt epoch) behind a conversation or a
response's session, for the admin residency views (any tenant: callers hold an admin key).
Nothing here commits."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import Conversation, Response, Tenant


@dataclass(frozen=True)
class SessionOwner:
    session_id: str
    tenant_id: str
    salt_epoch: int
    conversation_id: str | None
    response_id: str | None
    # Whose prefix the branch residency is of: the response, or a conversation's latest.
    branch_response_id: str | None


async def conversation_owner(session: AsyncSession, conversation_id: str) -> SessionOwner | None:
    """A conversation is its own session; its branch is its latest response's."""
    row = (
        await session.execute(
            select(Conversation.tenant_id, Tenant.salt_epoch, Conversation.head_response_id)
            .join(Tenant, Tenant.id == Conversation.tenant_id)
            .where(Conversation.id == conversation_id)
        )
    ).first()
    if row is None:
        return None
    return SessionOwner(conversation_id, row[0], row[1], conversation_id, None, row[2])


async def response_owner(session: AsyncSession, response_id: str) -> SessionOwner | None:
    """The session a response ran in (a chain's, inherited from its root)."""
    row = (
        await session.execute(
            select(
                Response.session_id, Response.tenant_id, Tenant.salt_epoch, Response.conversation_id
            )
            .join(Tenant, Tenant.id == Response.tenant_id)
            .where(Response.id == response_id)
        )
    ).first()
    if row is None:
        return None
    return SessionOwner(row[0], row[1], row[2], row[3], response_id, response_id)
