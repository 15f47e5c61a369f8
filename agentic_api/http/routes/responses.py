"""/v1/responses: create (JSON, SSE or background), retrieve (or replay / follow), cancel,
delete, input items."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from agentic_api.http.auth import services_of
from agentic_api.http.idempotency import idempotency_key, replay
from agentic_api.http.include import checked_include
from agentic_api.http.json_response import JsonResponse
from agentic_api.http.route_parts import ListLimit, ListOrder, Tenant, json_body
from agentic_api.http.sse import (
    TurnEventStream,
    from_followed,
    from_list,
    from_stored,
    sse_response,
)
from agentic_api.serving import create, responses
from agentic_api.serving.responses import FollowedEvents, RebuiltEvents, StoredEventList
from agentic_api.serving.results import Final, Prewarmed, Queued, Streaming
from agentic_api.serving.tenants import caller_of
from agentic_api.wire.limits import MAX_INTEGER
from agentic_api.wire.multi_agent import beta_of
from agentic_api.wire.requests import CreateResponseRequest, parse_create_request

router = APIRouter(tags=["responses"])


@router.post(
    "/v1/responses",
    openapi_extra=json_body(CreateResponseRequest),
)
async def create_response(request: Request, tenant: Tenant) -> Response:
    services = services_of(request)
    key = idempotency_key(request)
    beta = beta_of(request.query_params, request.headers)
    parsed, raw = parse_create_request(await request.body(), beta)
    created = await create.create_response(services, caller_of(tenant), parsed, raw, key=key)
    if isinstance(created, Final):
        return JsonResponse(created.response)
    if isinstance(created, Streaming):
        return TurnEventStream(created.stream)
    if isinstance(created, Prewarmed):
        if parsed.stream:
            return sse_response(from_list(created.events))
        return JsonResponse(created.response)
    if isinstance(created, Queued):
        if created.events is not None:
            return sse_response(from_followed(created.events))
        return JsonResponse(created.response)
    return replay(created)


@router.get("/v1/responses/{response_id}")
async def retrieve_response(
    response_id: str,
    request: Request,
    tenant: Tenant,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1, le=MAX_INTEGER)] = None,
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> Response:
    found = await responses.retrieve(
        services_of(request),
        tenant.id,
        response_id,
        stream=stream,
        starting_after=starting_after,
        include=checked_include(request),
    )
    if isinstance(found, FollowedEvents):
        return sse_response(from_followed(found.events))
    if isinstance(found, StoredEventList):
        return sse_response(from_stored(found.events))
    if isinstance(found, RebuiltEvents):
        return sse_response(from_list(found.events))
    return JsonResponse(found)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request, tenant: Tenant) -> JsonResponse:
    """Cancels a queued or running background response; a finished one comes back as is."""
    return JsonResponse(await responses.cancel(services_of(request), tenant.id, response_id))


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    return await responses.delete(services_of(request), tenant.id, response_id)


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str,
    request: Request,
    tenant: Tenant,
    after: str | None = None,
    limit: ListLimit = 20,
    order: ListOrder = "desc",
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> dict[str, Any]:
    # Stored input items are shown as sent (an image's URL included); reasoning sealed
    # when asked.
    included = checked_include(request)
    return await responses.input_items(
        services_of(request),
        tenant.id,
        response_id,
        after=after,
        limit=limit,
        descending=order == "desc",
        include=included,
    )
