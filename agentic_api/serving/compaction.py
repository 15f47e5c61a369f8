"""``POST /v1/responses/compact``: the history compacted by the model, nothing stored."""

from __future__ import annotations

from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.runtime import Runtime
from agentic_api.serving.tenants import TenantContext, caller_of
from agentic_api.storage.agent_rounds import AgentRoundRepository
from agentic_api.turns.without_commit.compact import compact
from agentic_api.wire.requests import CreateResponseRequest


async def compact_history(
    services: Runtime, tenant: TenantContext, request: CreateResponseRequest
) -> dict[str, Any]:
    """The compacted history as the response object the route returns. A multi-agent
    response is not compacted on request (the beta compacts automatically)."""
    parent = request.previous_response_id
    if parent is not None:
        async with services.db.read() as session:
            if await AgentRoundRepository(session).any_for(tenant.id, parent):
                raise InvalidRequest(
                    "Explicit compaction is not supported for multi-agent responses; use "
                    "'context_management' on the multi-agent request instead.",
                    param="previous_response_id",
                    code="unsupported_parameter",
                )
    return await compact(services, caller_of(tenant), request)
