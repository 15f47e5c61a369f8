"""``POST /v1/responses/input_tokens``: the exact input-token count of a would-be turn.

Registered before the responses router so the path is not taken for a response id.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request

from agentic_api.http.auth import services_of
from agentic_api.http.route_parts import Tenant, json_body
from agentic_api.serving.input_tokens import input_tokens as count_input_tokens
from agentic_api.wire.requests import (
    CreateResponseRequest,
    parse_create_request,
    parse_json_object,
)

router = APIRouter(tags=["responses"])


@router.post(
    "/v1/responses/input_tokens",
    openapi_extra=json_body(CreateResponseRequest),
)
async def input_tokens(request: Request, tenant: Tenant) -> dict[str, Any]:
    services = services_of(request)
    data = parse_json_object(await request.body())
    # Unlike create, counting may omit input (e.g. only what previous_response_id holds).
    data.setdefault("input", [])
    create, _raw = parse_create_request(orjson.dumps(data))
    count = await count_input_tokens(services, tenant, create)
    return {"object": "response.input_tokens", "input_tokens": count}
