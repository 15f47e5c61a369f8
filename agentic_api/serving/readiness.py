"""Readiness: the database and the upstream both reachable, each check said by name."""

from __future__ import annotations

from typing import Any

from agentic_api.errors import ApiError
from agentic_api.runtime import Runtime


async def readiness(services: Runtime) -> dict[str, Any]:
    """The /ready body; its ``failing`` list is empty when the server is ready."""
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
    return {"status": "ready" if not failing else "not_ready", "failing": failing, **checks}
