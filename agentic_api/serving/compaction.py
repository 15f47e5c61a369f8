"""``POST /v1/responses/compact``: the history compacted by the model, nothing stored."""

from __future__ import annotations

from typing import Any

from agentic_api.runtime import Runtime
from agentic_api.serving.tenants import TenantContext, caller_of
from agentic_api.turns.without_commit.compact import compact
from agentic_api.wire.requests import CreateResponseRequest


async def compact_history(
    services: Runtime, tenant: TenantContext, request: CreateResponseRequest
) -> dict[str, Any]:
    """The compacted history as the response object the route returns."""
    return await compact(services, caller_of(tenant), request)
