"""/v1/conversations: create, retrieve, update, delete, and the items of one conversation.

Every query is scoped to the caller's tenant, so another tenant's conversation is a 404.
Bodies are read raw and validated by ``wire.conversations`` so every failure is an
OpenAI-shaped 400 raised before anything is written.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel
from starlette.responses import Response

from agentic_api.http.auth import services_of
from agentic_api.http.idempotency import idempotency_key, replay
from agentic_api.http.include import checked_include
from agentic_api.http.json_response import JsonResponse
from agentic_api.http.route_parts import ListLimit, ListOrder, Tenant, error_responses, json_body
from agentic_api.serving import conversations
from agentic_api.serving.conversation_items import append_items
from agentic_api.serving.results import Replayed
from agentic_api.wire.conversations import (
    AddItemsRequest,
    ConversationDeleted,
    ConversationItemList,
    ConversationObject,
    CreateConversationRequest,
    UpdateConversationRequest,
    deleted_object,
    parse_add_items,
    parse_create,
    parse_update,
)
from agentic_api.wire.limits import MAX_INCLUDE_ENTRIES

_ERRORS = error_responses(
    (400, "Invalid parameters or items"),
    (401, "Missing or unknown API key"),
    (404, "No such conversation or item (another tenant's is not found either)"),
    ("4XX", "Any other client error"),
)
router = APIRouter(tags=["conversations"], responses=_ERRORS)
# Checked (http/include.py) and honoured by what items are: stored whole, as sent.
Include = Annotated[list[str] | None, Query(alias="include[]", max_length=MAX_INCLUDE_ENTRIES)]


def _documented(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": model}}


@router.post(
    "/v1/conversations",
    openapi_extra=json_body(CreateConversationRequest),
    responses=_documented(ConversationObject),
)
async def create_conversation(request: Request, tenant: Tenant) -> JsonResponse:
    new = parse_create(await request.body())
    services = services_of(request)
    return JsonResponse(await conversations.create(services, tenant.id, new))


@router.get("/v1/conversations/{conversation_id}", responses=_documented(ConversationObject))
async def retrieve_conversation(
    conversation_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    found = await conversations.retrieve(services_of(request), tenant.id, conversation_id)
    return JsonResponse(found)


@router.post(
    "/v1/conversations/{conversation_id}",
    openapi_extra=json_body(UpdateConversationRequest),
    responses=_documented(ConversationObject),
)
async def update_conversation(
    conversation_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    metadata = parse_update(await request.body())
    services = services_of(request)
    return JsonResponse(await conversations.update(services, tenant.id, conversation_id, metadata))


@router.delete("/v1/conversations/{conversation_id}", responses=_documented(ConversationDeleted))
async def delete_conversation(
    conversation_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    await conversations.delete(services_of(request), tenant.id, conversation_id)
    return JsonResponse(deleted_object(conversation_id))


@router.post(
    "/v1/conversations/{conversation_id}/items",
    openapi_extra=json_body(AddItemsRequest),
    responses=_documented(ConversationItemList),
)
async def add_items(
    conversation_id: str, request: Request, tenant: Tenant, include: Include = None
) -> Response:
    checked_include(request)
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
    limit: ListLimit = 20,
    order: ListOrder = "desc",
    include: Include = None,
) -> JsonResponse:
    page = await conversations.list_items(
        services_of(request),
        tenant.id,
        conversation_id,
        after=after,
        limit=limit,
        descending=order == "desc",
        include=checked_include(request),
    )
    return JsonResponse(page)


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
    services = services_of(request)
    included = checked_include(request)
    return JsonResponse(
        await conversations.retrieve_item(
            services, tenant.id, conversation_id, item_id, include=included
        )
    )


@router.delete(
    "/v1/conversations/{conversation_id}/items/{item_id}",
    responses=_documented(ConversationObject),
)
async def delete_item(
    conversation_id: str, item_id: str, request: Request, tenant: Tenant
) -> JsonResponse:
    """Removes one item; like OpenAI, answers with the (updated) Conversation object."""
    services = services_of(request)
    return JsonResponse(
        await conversations.delete_item(services, tenant.id, conversation_id, item_id)
    )
