"""/v1/responses: create (JSON, SSE or background), retrieve (or replay / follow), cancel,
delete, input items."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from agentic_api.background import queue as background
from agentic_api.background.follow import follow
from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.http.auth import require_tenant, services_of
from agentic_api.http.idempotency import idempotency_key, replay
from agentic_api.http.json_response import JsonResponse
from agentic_api.http.sse import from_followed, from_list, from_stored, from_turn, sse_response
from agentic_api.serving import create
from agentic_api.serving.results import Final, Queued, Streaming
from agentic_api.serving.tenants import TenantContext
from agentic_api.storage.responses import ResponseRepository
from agentic_api.turns.prepare import Caller
from agentic_api.turns.rebuilt_events import rebuild_events
from agentic_api.wire.limits import MAX_INTEGER, MAX_LIST_LIMIT
from agentic_api.wire.listing import present_item
from agentic_api.wire.requests import CreateResponseRequest, parse_create_request
from agentic_api.wire.status import TERMINAL_STATUSES

router = APIRouter(tags=["responses"])
Tenant = Annotated[TenantContext, Depends(require_tenant)]


def caller_of(tenant: TenantContext) -> Caller:
    return Caller(tenant.id, tenant.salt_epoch, tenant.cache_salt)


def response_not_found(response_id: str) -> ApiError:
    return ApiError(
        f"Response with id '{response_id}' not found.",
        status_code=404,
        error_type="invalid_request_error",
        code="not_found",
    )


@router.post(
    "/v1/responses",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CreateResponseRequest.model_json_schema()}},
        }
    },
)
async def create_response(request: Request, tenant: Tenant) -> Response:
    services = services_of(request)
    key = idempotency_key(request)
    parsed, raw = parse_create_request(await request.body())
    created = await create.create_response(services, caller_of(tenant), parsed, raw, key=key)
    if isinstance(created, Final):
        return JsonResponse(created.response)
    if isinstance(created, Streaming):
        return sse_response(from_turn(created.stream))
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
    services = services_of(request)
    async with services.db.read() as session:
        repo = ResponseRepository(session)
        row = await repo.get(tenant.id, response_id)
        if row is None:
            raise response_not_found(response_id)
        if not stream:
            return JsonResponse(row.body)
        if row.background:
            # Its events are stored as they are produced, by whichever process runs it.
            return sse_response(from_followed(follow(services.db, row.id, starting_after)))
        stored = await repo.events(row.id, starting_after)
        # Nothing after the cursor may still mean a streamed response read to its end.
        was_streamed = bool(stored) or await repo.last_sequence(row.id) >= 0
    if was_streamed:
        return sse_response(from_stored(stored))
    after = -1 if starting_after is None else starting_after
    return sse_response(
        from_list(e for e in rebuild_events(row.body) if e["sequence_number"] > after)
    )


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request, tenant: Tenant) -> JsonResponse:
    """Cancels a queued or running background response; a finished one comes back as is."""
    return JsonResponse(await background.cancel(services_of(request), tenant.id, response_id))


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    services = services_of(request)
    async with services.db.read() as session:
        row = await ResponseRepository(session).get(tenant.id, response_id)
    if row is not None and row.background and row.status not in TERMINAL_STATUSES:
        # A deleted response must not keep running (and spending) in a worker.
        await background.cancel(services, tenant.id, response_id)
    async with services.db.write() as session:
        deleted = await ResponseRepository(session).mark_deleted(tenant.id, response_id)
    if not deleted:
        raise response_not_found(response_id)
    services.histories.forget(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str,
    request: Request,
    tenant: Tenant,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 20,
    order: Literal["asc", "desc"] = "desc",
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> dict[str, Any]:
    services = services_of(request)
    async with services.db.read() as session:
        repo = ResponseRepository(session)
        row = await repo.get(tenant.id, response_id)
        if row is None:
            raise response_not_found(response_id)
        after_position = None
        if after is not None:
            after_position = await repo.item_position(row.id, after)
            if after_position is None:
                raise InvalidRequest(
                    f"No input item '{after}' in this response.",
                    param="after",
                    code="invalid_value",
                )
        rows = await repo.input_items(
            row.id, after_position=after_position, limit=limit + 1, descending=order == "desc"
        )
    page = rows[:limit]
    data = [present_item(orjson.loads(r.data)) for r in page]
    return {
        "object": "list",
        "data": data,
        "first_id": page[0].item_id if page else None,
        "last_id": page[-1].item_id if page else None,
        "has_more": len(rows) > limit,
    }
