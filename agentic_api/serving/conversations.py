"""Conversations and their items: create, retrieve, update, delete, list and remove.
Appending items (with an Idempotency-Key) is ``serving.conversation_items``.

Every query is scoped to the caller's tenant, so another tenant's conversation is a 404.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_api.errors import ApiError, InvalidRequest, NotFound
from agentic_api.runtime import Runtime
from agentic_api.serving.conversation_items import new_items
from agentic_api.serving.pagination import item_page, shown_item
from agentic_api.storage.conversations import ConversationRepository
from agentic_api.storage.models import Conversation
from agentic_api.storage.types import to_unix
from agentic_api.turns.prepare.errors import conversation_not_found
from agentic_api.wire.conversations import NewConversation, conversation_object
from agentic_api.wire.reasoning_seal import wants_sealed_reasoning


def _object(row: Conversation) -> dict[str, Any]:
    return conversation_object(row.id, to_unix(row.created_at) or 0, row.metadata_)


def _item_not_found(item_id: str) -> ApiError:
    return NotFound(f"Item with id '{item_id}' not found in this conversation.")


async def create(services: Runtime, tenant_id: str, new: NewConversation) -> dict[str, Any]:
    async with services.db.write() as session:
        row = await ConversationRepository(session).create(
            tenant_id, new.metadata, new_items(new.items), safety_identifier=new.safety_identifier
        )
    return _object(row)


async def retrieve(services: Runtime, tenant_id: str, conversation_id: str) -> dict[str, Any]:
    async with services.db.read() as session:
        row = await ConversationRepository(session).get(tenant_id, conversation_id)
    if row is None:
        raise conversation_not_found(conversation_id)
    return _object(row)


async def update(
    services: Runtime, tenant_id: str, conversation_id: str, metadata: dict[str, str]
) -> dict[str, Any]:
    async with services.db.write() as session:
        repo = ConversationRepository(session)
        row = await repo.set_metadata(tenant_id, conversation_id, metadata)
    if row is None:
        raise conversation_not_found(conversation_id)
    return _object(row)


async def delete(services: Runtime, tenant_id: str, conversation_id: str) -> None:
    async with services.db.write() as session:
        deleted = await ConversationRepository(session).delete(tenant_id, conversation_id)
    if not deleted:
        raise conversation_not_found(conversation_id)


async def list_items(
    services: Runtime,
    tenant_id: str,
    conversation_id: str,
    *,
    after: str | None,
    limit: int,
    descending: bool,
    include: Sequence[str] = (),
) -> dict[str, Any]:
    """One page of the conversation's items, as a list object (``include`` checked by
    the route: each value is honoured by items being shown as stored, reasoning sealed
    when asked)."""
    async with services.db.read() as session:
        repo = ConversationRepository(session)
        if not await repo.exists(tenant_id, conversation_id):
            raise conversation_not_found(conversation_id)
        after_position = None
        if after is not None:
            cursor = await repo.item(tenant_id, conversation_id, after)
            if cursor is None:
                raise InvalidRequest(
                    f"No item '{after}' in this conversation.", param="after", code="invalid_value"
                )
            after_position = cursor.position
        rows = await repo.page(
            tenant_id,
            conversation_id,
            after_position=after_position,
            limit=limit + 1,
            descending=descending,
        )
    return item_page(rows, limit, sealed=wants_sealed_reasoning(include))


async def retrieve_item(
    services: Runtime,
    tenant_id: str,
    conversation_id: str,
    item_id: str,
    include: Sequence[str] = (),
) -> dict[str, Any]:
    async with services.db.read() as session:
        repo = ConversationRepository(session)
        if not await repo.exists(tenant_id, conversation_id):
            raise conversation_not_found(conversation_id)
        row = await repo.item(tenant_id, conversation_id, item_id)
    if row is None:
        raise _item_not_found(item_id)
    return shown_item(row, sealed=wants_sealed_reasoning(include))


async def delete_item(
    services: Runtime, tenant_id: str, conversation_id: str, item_id: str
) -> dict[str, Any]:
    """Removes one item; like OpenAI, answers with the (updated) Conversation object."""
    async with services.db.write() as session:
        repo = ConversationRepository(session)
        row = await repo.get(tenant_id, conversation_id)
        if row is None:
            raise conversation_not_found(conversation_id)
        if not await repo.remove_item(tenant_id, conversation_id, item_id):
            raise _item_not_found(item_id)
    return _object(row)
