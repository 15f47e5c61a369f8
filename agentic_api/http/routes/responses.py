"""/v1/responses: create (JSON, SSE or background), retrieve (or replay / follow), cancel,
delete, input items."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Annotated, Any, Literal, TypeVar

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from agentic_api import idempotency
from agentic_api.background import queue as background
from agentic_api.background.follow import follow
from agentic_api.background.queue import enqueue
from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.http.auth import TenantContext, require_tenant, services_of
from agentic_api.http.idempotency import idempotency_key, replay
from agentic_api.http.json_response import JsonResponse
from agentic_api.http.sse import from_channel, from_followed, from_list, from_stored, sse_response
from agentic_api.idempotency import Claim, requires_store
from agentic_api.storage.idempotency import KeyRef, Outcome
from agentic_api.storage.responses import ResponseRepository
from agentic_api.turns.channel import TurnChannel
from agentic_api.turns.prepare import Caller, prepare_turn
from agentic_api.turns.rebuilt_events import rebuild_events
from agentic_api.turns.render import agentic_context_of
from agentic_api.turns.run import TurnFailed, run_turn
from agentic_api.wire.limits import MAX_INTEGER, MAX_LIST_LIMIT
from agentic_api.wire.listing import present_item
from agentic_api.wire.requests import CreateResponseRequest, parse_create_request
from agentic_api.wire.status import TERMINAL_STATUSES

T = TypeVar("T")
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
    create, raw = parse_create_request(await request.body())
    caller = caller_of(tenant)
    claim: Claim | None = None
    if key is not None:
        if not create.store:
            raise requires_store()
        claimed = await idempotency.claim(
            services.db,
            KeyRef(tenant.id, idempotency.RESPONSES, key),
            idempotency.request_hash(raw),
            ttl_seconds=services.settings.idempotency_ttl_seconds,
            lease_seconds=services.settings.lease_seconds,
        )
        if isinstance(claimed, Outcome):
            return replay(services, claimed)
        claim = claimed
    if create.background:
        queued = await enqueue(services, caller, create, claim=claim)
        if create.stream:
            return sse_response(from_followed(follow(services.db, queued["id"], None)))
        return JsonResponse(queued)
    try:
        turn = await prepare_turn(
            services.db,
            caller,
            create,
            histories=services.histories,
            tags=services.session_tags,
            agentic_context=agentic_context_of(services.settings),
        )
    except BaseException:
        if claim is not None:
            await claim.release()
        raise
    if claim is not None:
        # The outcome is recorded by the turn's commit, in its transaction.
        turn.commit_steps.append(claim.records("stream" if create.stream else "json"))
    if create.stream:
        channel = TurnChannel()
        task = services.spawn(_held(claim, run_turn(services, turn, channel)))
        try:
            await channel.wait_opened()
        except BaseException:
            # Let the turn's task release the key before the client can retry.
            await asyncio.wait({task})
            raise
        cancel = services.settings.stream_disconnect == "cancel"
        return sse_response(from_channel(channel, task, cancel_on_disconnect=cancel))
    try:
        final = await _held(claim, run_turn(services, turn))
    except TurnFailed as failed:
        raise ApiError(
            f"Response '{turn.response_id}' failed: {failed.error.message}",
            status_code=failed.error.status_code,
            error_type=failed.error.error_type,
            code=failed.error.code,
        ) from failed
    return JsonResponse(final)


def _held(claim: Claim | None, work: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
    """``work`` with the Idempotency-Key claim (if any) held while it runs."""
    return work if claim is None else claim.hold(work)


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
