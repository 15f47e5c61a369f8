"""/admin/v1 residency: per replica, how much of a session's KV cache its events report
resident, and its evictions (``operator/handlers/admin/residency.py``; admin keys only, like the
rest of /admin/v1)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from agentic_api.http.auth import services_of
from agentic_api.operator.handlers.admin import residency
from agentic_api.operator.http.admin import router as admin_router
from agentic_api.operator.shapes.residency import SessionResidency

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
    return await residency.conversation_residency(services_of(request), conversation_id)


@router.get(
    "/responses/{response_id}/residency",
    summary="KV residency of a response's own prefix (its branch) and of its session, per replica",
)
async def response_residency(response_id: str, request: Request) -> SessionResidency:
    return await residency.response_residency(services_of(request), response_id)
