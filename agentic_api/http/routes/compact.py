"""``POST /v1/responses/compact``: a history compacted by the model into one item."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request

from agentic_api.http.auth import services_of
from agentic_api.http.route_parts import Tenant
from agentic_api.serving.compaction import compact_history as compacted
from agentic_api.wire.compact import check_compact_fields
from agentic_api.wire.multi_agent import beta_of, refuse_compaction_beta
from agentic_api.wire.requests import parse_create_request, parse_json_object

router = APIRouter(tags=["responses"])


@router.post("/v1/responses/compact")
async def compact_history(request: Request, tenant: Tenant) -> dict[str, Any]:
    services = services_of(request)
    refuse_compaction_beta(beta_of(request.query_params, request.headers))
    data = parse_json_object(await request.body())
    check_compact_fields(data)
    data.setdefault("input", [])
    # Compacting reads history and stores nothing.
    data["store"] = False
    create, _raw = parse_create_request(orjson.dumps(data))
    return await compacted(services, tenant, create)
