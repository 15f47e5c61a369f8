"""Readiness: the database and the upstream (with named replicas: any one of them) both
reachable, each check said by name."""

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
    # Named replicas: ready while any one of them answers (placement sends to those).
    errors: list[str] = []
    for client in list(services.replicas.values()) or [services.upstream]:
        try:
            await client.health()
            checks["upstream"] = {"ok": True}
            break
        except ApiError as exc:
            errors.append(exc.message)
    else:
        checks["upstream"] = {"ok": False, "error": "; ".join(errors)}
    failing = [name for name, check in checks.items() if not check["ok"]]
    return {"status": "ready" if not failing else "not_ready", "failing": failing, **checks}
