"""/v1/responses: create (JSON or SSE), retrieve (or replay), delete, input items."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse, Response

from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.http.auth import TenantContext, require_tenant, services_of
from agentic_api.http.sse import from_channel, from_list, from_stored, sse_response
from agentic_api.storage.responses import ResponseRepository
from agentic_api.turns.channel import TurnChannel
from agentic_api.turns.prepare import Caller, prepare_turn
from agentic_api.turns.replay import rebuild_events
from agentic_api.turns.run import TurnFailed, run_turn
from agentic_api.wire.limits import MAX_LIST_LIMIT
from agentic_api.wire.listing import present_item
from agentic_api.wire.requests import CreateResponseRequest, parse_create_request

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
    create, _raw = parse_create_request(await request.body())
    if create.background:
        raise InvalidRequest(
            "Background mode is not available on this server yet.",
            param="background",
            code="unsupported_parameter",
        )
    turn = await prepare_turn(services.db, caller_of(tenant), create)
    if create.stream:
        channel = TurnChannel()
        task = services.spawn(run_turn(services, turn, channel))
        await channel.wait_opened()
        cancel = services.settings.stream_disconnect == "cancel"
        return sse_response(from_channel(channel, task, cancel_on_disconnect=cancel))
    try:
        final = await run_turn(services, turn)
    except TurnFailed as failed:
        raise ApiError(
            f"Response '{turn.response_id}' failed: {failed.error.message}",
            status_code=failed.error.status_code,
            error_type=failed.error.error_type,
            code=failed.error.code,
        ) from failed
    return JSONResponse(final)


@router.get("/v1/responses/{response_id}")
async def retrieve_response(
    response_id: str,
    request: Request,
    tenant: Tenant,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> Response:
    services = services_of(request)
    async with services.db.read() as session:
        repo = ResponseRepository(session)
        row = await repo.get(tenant.id, response_id)
        if row is None:
            raise response_not_found(response_id)
        if not stream:
            return JSONResponse(row.body)
        stored = await repo.events(row.id, starting_after)
        was_streamed = bool(stored) or bool(await repo.events(row.id, None))
    if was_streamed:
        return sse_response(from_stored(stored))
    after = -1 if starting_after is None else starting_after
    return sse_response(
        from_list(e for e in rebuild_events(row.body) if e["sequence_number"] > after)
    )


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    services = services_of(request)
    async with services.db.write() as session:
        deleted = await ResponseRepository(session).mark_deleted(tenant.id, response_id)
    if not deleted:
        raise response_not_found(response_id)
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
