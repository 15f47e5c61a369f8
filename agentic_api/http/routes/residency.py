"""/admin/v1 residency: per replica, how much of a session's KV cache its events report
resident, and its evictions (``cache/residency``; admin keys only, like the rest of
/admin/v1)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from agentic_api.errors import NotFound
from agentic_api.http.auth import services_of
from agentic_api.http.residency_view import session_residency
from agentic_api.http.routes.admin import router as admin_router
from agentic_api.storage.session_owners import conversation_owner, response_owner
from agentic_api.wire.residency import SessionResidency

router = APIRouter(
    prefix="/admin/v1",
    tags=["admin"],
    dependencies=admin_router.dependencies,
    responses=admin_router.responses,
)


@router.get(
    "/conversations/{conversation_id}/residency",
    summary="KV residency of a conversation's session on each replica, as its events said",
)
async def conversation_residency(conversation_id: str, request: Request) -> SessionResidency:
    services = services_of(request)
    async with services.db.read() as session:
        owner = await conversation_owner(session, conversation_id)
    if owner is None:
        raise NotFound(f"No conversation with id '{conversation_id}'.", param="conversation_id")
    return session_residency(owner, services.residency, services.secret)


@router.get(
    "/responses/{response_id}/residency",
    summary="KV residency of the session a response ran in (its chain's), on each replica",
)
async def response_residency(response_id: str, request: Request) -> SessionResidency:
    services = services_of(request)
    async with services.db.read() as session:
        owner = await response_owner(session, response_id)
    if owner is None:
        raise NotFound(f"No response with id '{response_id}'.", param="response_id")
    return session_residency(owner, services.residency, services.secret)
