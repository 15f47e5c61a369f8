"""/admin/v1 residency: per replica, how much of a session's KV cache its events report
resident, and its evictions (``cache/residency``; admin keys only, like the rest of
/admin/v1)."""

from __future__ import annotations

from array import array

from fastapi import APIRouter, Request
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.errors import NotFound
from agentic_api.http.auth import services_of
from agentic_api.http.residency_view import branch_tokens, session_residency
from agentic_api.http.routes.admin import router as admin_router
from agentic_api.services import Services
from agentic_api.storage.session_owners import SessionOwner, conversation_owner, response_owner
from agentic_api.wire.residency import SessionResidency

router = APIRouter(
    prefix="/admin/v1",
    tags=["admin"],
    dependencies=admin_router.dependencies,
    responses=admin_router.responses,
)


@router.get(
    "/conversations/{conversation_id}/residency",
    summary="KV residency of a conversation's session and its latest response's prefix",
)
async def conversation_residency(conversation_id: str, request: Request) -> SessionResidency:
    services = services_of(request)
    async with services.db.read() as session:
        owner = await conversation_owner(session, conversation_id)
        tokens = await _branch(session, services, owner)
    if owner is None:
        raise NotFound(f"No conversation with id '{conversation_id}'.", param="conversation_id")
    return session_residency(owner, services.residency, services.secret, tokens)


@router.get(
    "/responses/{response_id}/residency",
    summary="KV residency of a response's own prefix (its branch) and of its session, per replica",
)
async def response_residency(response_id: str, request: Request) -> SessionResidency:
    services = services_of(request)
    async with services.db.read() as session:
        owner = await response_owner(session, response_id)
        tokens = await _branch(session, services, owner)
    if owner is None:
        raise NotFound(f"No response with id '{response_id}'.", param="response_id")
    return session_residency(owner, services.residency, services.secret, tokens)


async def _branch(
    session: AsyncSession, services: Services, owner: SessionOwner | None
) -> array[int] | str | None:
    """The branch response's token ids, read only when there is something to match."""
    if owner is None or owner.branch_response_id is None or services.residency is None:
        return None
    return await branch_tokens(
        session, services.artifacts, owner.tenant_id, owner.branch_response_id
    )
