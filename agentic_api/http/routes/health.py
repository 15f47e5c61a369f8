"""Liveness (/health) and readiness (/ready: database and upstream both reachable)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from agentic_api.errors import ApiError
from agentic_api.http.auth import services_of
from agentic_api.http.json_response import JsonResponse

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request) -> JsonResponse:
    services = services_of(request)
    checks: dict[str, Any] = {}
    try:
        await services.db.ping()
        checks["database"] = {"ok": True}
    except Exception as exc:  # any driver failure means "not ready", whatever its type
        checks["database"] = {"ok": False, "error": type(exc).__name__}
    try:
        await services.upstream.health()
        checks["upstream"] = {"ok": True}
    except ApiError as exc:
        checks["upstream"] = {"ok": False, "error": exc.message}
    failing = [name for name, check in checks.items() if not check["ok"]]
    body = {"status": "ready" if not failing else "not_ready", "failing": failing, **checks}
    return JsonResponse(body, status_code=200 if not failing else 503)
