"""Liveness (/health) and readiness (/ready: database and upstream both reachable)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from agentic_api.http.auth import services_of
from agentic_api.http.json_response import JsonResponse
from agentic_api.serving.readiness import readiness

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request) -> JsonResponse:
    body = await readiness(services_of(request))
    return JsonResponse(body, status_code=503 if body["failing"] else 200)
