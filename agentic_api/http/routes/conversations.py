"""/v1/conversations: create, retrieve, update, delete, and the items of one conversation.

Every query is scoped to the caller's tenant, so another tenant's conversation is a 404.
Bodies are read raw and validated by ``wire.conversations`` so every failure is an
OpenAI-shaped 400 raised before anything is written.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel
from starlette.responses import Response

from agentic_api.errors import ApiError, InvalidRequest, NotFound
from agentic_api.http.auth import require_tenant, services_of
from agentic_api.http.idempotency import idempotency_key, replay
from agentic_api.http.json_response import JsonResponse
from agentic_api.serving.conversation_items import append_items, new_items
from agentic_api.serving.results import Replayed
from agentic_api.serving.tenants import TenantContext
from agentic_api.storage.conversations import ConversationRepository, StoredConversationItem
from agentic_api.storage.models import Conversation
from agentic_api.storage.types import to_unix
from agentic_api.turns.errors import conversation_not_found
from agentic_api.wire.conversations import (
    AddItemsRequest,
    ConversationDeleted,
    ConversationItemList,
    ConversationObject,
    CreateConversationRequest,
    UpdateConversationRequest,
    conversation_object,
    deleted_object,
    item_list,
    parse_add_items,
    parse_create,
    parse_update,
)
from agentic_api.wire.errors import ErrorBody
from agentic_api.wire.limits import MAX_INCLUDE_ENTRIES, MAX_LIST_LIMIT
from agentic_api.wire.listing import present_item

# Failures are OpenAI-shaped; "4XX" also replaces FastAPI's default 422 entry, which
# would be wrong here (validation errors are rendered as 400s).
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "Invalid parameters or items"),
        (401, "Missing or unknown API key"),
        (404, "No such conversation or item (another tenant's is not found either)"),
        ("4XX", "Any other client error"),
    )
}
router = APIRouter(tags=["conversations"], responses=_ERRORS)
Tenant = Annotated[TenantContext, Depends(require_tenant)]
# Accepted for compatibility and ignored: items are stored whole, nothing is held back.
Include = Annotated[list[str] | None, Query(alias="include[]", max_length=MAX_INCLUDE_ENTRIES)]


def _body(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _documented(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": model}}


def _object(row: Conversation) -> dict[str, Any]:
    return conversation_object(row.id, to_unix(row.created_at) or 0, row.metadata_)


def _shown(row: StoredConversationItem) -> dict[str, Any]:
    return present_item(orjson.loads(row.data))


def _item_not_found(item_id: str) -> ApiError:
    return NotFound(f"Item with id '{item_id}' not found in this conversation.")


@router.post(
    "/v1/conversations",
    openapi_extra=_body(CreateConversationRequest),
    responses=_documented(ConversationObject),
)
async def create_conversation(request: Request, tenant: Tenant) -> JsonResponse:
    items, metadata = parse_create(await request.body())
    async with services_of(request).db.write() as session:
        row = await ConversationRepository(session).create(tenant.id, metadata, new_items(items))
    return JsonResponse(_object(row))


@router.get("/v1/conversations/{conversation_id}", responses=_documented(ConversationObject))
async def retrieve_conversation(
    conversation_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    async with services_of(request).db.read() as session:
        row = await ConversationRepository(session).get(tenant.id, conversation_id)
    if row is None:
        raise conversation_not_found(conversation_id)
    return JsonResponse(_object(row))


@router.post(
    "/v1/conversations/{conversation_id}",
    openapi_extra=_body(UpdateConversationRequest),
    responses=_documented(ConversationObject),
)
async def update_conversation(
    conversation_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    metadata = parse_update(await request.body())
    async with services_of(request).db.write() as session:
        repo = ConversationRepository(session)
        row = await repo.set_metadata(tenant.id, conversation_id, metadata)
    if row is None:
        raise conversation_not_found(conversation_id)
    return JsonResponse(_object(row))


@router.delete("/v1/conversations/{conversation_id}", responses=_documented(ConversationDeleted))
async def delete_conversation(
    conversation_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    async with services_of(request).db.write() as session:
        deleted = await ConversationRepository(session).delete(tenant.id, conversation_id)
    if not deleted:
        raise conversation_not_found(conversation_id)
    return JsonResponse(deleted_object(conversation_id))


@router.post(
    "/v1/conversations/{conversation_id}/items",
    openapi_extra=_body(AddItemsRequest),
    responses=_documented(ConversationItemList),
)
async def add_items(
    conversation_id: str, request: Request, tenant: Tenant, include: Include = None
) -> Response:
    key = idempotency_key(request)
    raw = await request.body()
    items = parse_add_items(raw)
    added = await append_items(
        services_of(request), tenant.id, conversation_id, items, raw, key=key
    )
    if isinstance(added, Replayed):
        return replay(added)
    return JsonResponse(added)


@router.get(
    "/v1/conversations/{conversation_id}/items", responses=_documented(ConversationItemList)
)
async def list_items(
    conversation_id: str,
    request: Request,
    tenant: Tenant,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 20,
    order: Literal["asc", "desc"] = "desc",
    include: Include = None,
) -> JsonResponse:
    async with services_of(request).db.read() as session:
        repo = ConversationRepository(session)
        if not await repo.exists(tenant.id, conversation_id):
            raise conversation_not_found(conversation_id)
        after_position = None
        if after is not None:
            cursor = await repo.item(tenant.id, conversation_id, after)
            if cursor is None:
                raise InvalidRequest(
                    f"No item '{after}' in this conversation.", param="after", code="invalid_value"
                )
            after_position = cursor.position
        rows = await repo.page(
            tenant.id,
            conversation_id,
            after_position=after_position,
            limit=limit + 1,
            descending=order == "desc",
        )
    page = rows[:limit]
    return JsonResponse(
        item_list([_shown(r) for r in page], [r.item_id for r in page], has_more=len(rows) > limit)
    )


@router.get(
    "/v1/conversations/{conversation_id}/items/{item_id}",
    responses={
        200: {
            "description": "The item, as stored (any Responses API item type)",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
async def retrieve_item(
    conversation_id: str, item_id: str, request: Request, tenant: Tenant, include: Include = None
) -> JsonResponse:
    async with services_of(request).db.read() as session:
        repo = ConversationRepository(session)
        if not await repo.exists(tenant.id, conversation_id):
            raise conversation_not_found(conversation_id)
        row = await repo.item(tenant.id, conversation_id, item_id)
    if row is None:
        raise _item_not_found(item_id)
    return JsonResponse(_shown(row))


@router.delete(
    "/v1/conversations/{conversation_id}/items/{item_id}",
    responses=_documented(ConversationObject),
)
async def delete_item(
    conversation_id: str, item_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    """Removes one item; like OpenAI, answers with the (updated) Conversation object."""
    async with services_of(request).db.write() as session:
        repo = ConversationRepository(session)
        row = await repo.get(tenant.id, conversation_id)
        if row is None:
            raise conversation_not_found(conversation_id)
        if not await repo.remove_item(tenant.id, conversation_id, item_id):
            raise _item_not_found(item_id)
    return JsonResponse(_object(row))
