"""``POST /v1/responses/input_tokens``: the exact input-token count of a would-be turn."""

from __future__ import annotations

from agentic_api.runtime import Runtime
from agentic_api.serving.tenants import TenantContext, caller_of
from agentic_api.turns.without_commit.input_tokens import count_input_tokens
from agentic_api.wire.requests import CreateResponseRequest


async def input_tokens(
    services: Runtime, tenant: TenantContext, request: CreateResponseRequest
) -> int:
    """The turn's prompt length in tokens, as the model server's tokenizer counts it."""
    return await count_input_tokens(services, caller_of(tenant), request)
