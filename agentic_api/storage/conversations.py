"""Queries over conversations and their items (tenant-scoped; nothing here commits).

Concurrency rule: ``conversations.version`` counts changes to the item sequence. Every
append or removal bumps it, so a turn that read version *v* can commit its items only
while the conversation is still at *v* (``advance``); otherwise the history the model
saw is no longer the conversation's, and the turn loses. Metadata updates leave the
version alone: they change nothing the model sees.

Positions come from ``next_position`` and are never reused, so items keep their order,
a removal leaves a hole rather than renumbering, and an append never interleaves with
another (both claim their range in the same row update that bumps the version).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import Conversation, ConversationItem, Response
from agentic_api.storage.pagination import by_position
from agentic_api.storage.types import utcnow
from lineage import IdKind, mint_id


@dataclass(frozen=True)
class NewConversationItem:
    item_id: str
    type: str
    # Canonical JSON text: the exact bytes replayed upstream.
    data: str


@dataclass(frozen=True)
class StoredConversationItem:
    position: int
    item_id: str
    type: str
    data: str


# Its fields name the columns read, in order (rows become items positionally).
_ITEM_COLUMNS = tuple(
    getattr(ConversationItem, field.name) for field in fields(StoredConversationItem)
)


class ConversationRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def create(
        self,
        tenant_id: str,
        metadata: dict[str, Any],
        items: Sequence[NewConversationItem],
        *,
        safety_identifier: str | None = None,
    ) -> Conversation:
        now = utcnow()
        conversation = Conversation(
            id=mint_id(IdKind.CONVERSATION),
            tenant_id=tenant_id,
            created_at=now,
            updated_at=now,
            metadata_=metadata,
            next_position=len(items),
            version=0,
            head_response_id=None,
            safety_identifier=safety_identifier,
        )
        self.session.add(conversation)
        await self.session.flush()
        await self._insert_items(conversation.id, tenant_id, 0, items, response_id=None)
        return conversation

    async def get(self, tenant_id: str, conversation_id: str) -> Conversation | None:
        query = select(Conversation).where(
            Conversation.id == conversation_id, Conversation.tenant_id == tenant_id
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def exists(self, tenant_id: str, conversation_id: str) -> bool:
        query = select(Conversation.id).where(
            Conversation.id == conversation_id, Conversation.tenant_id == tenant_id
        )
        return (await self.session.execute(query)).first() is not None

    async def set_metadata(
        self, tenant_id: str, conversation_id: str, metadata: dict[str, Any]
    ) -> Conversation | None:
        conversation = await self.get(tenant_id, conversation_id)
        if conversation is not None:
            conversation.metadata_ = metadata
            conversation.updated_at = utcnow()
            await self.session.flush()
        return conversation

    async def delete(self, tenant_id: str, conversation_id: str) -> bool:
        """Removes the conversation and its items; its responses stay, unattached."""
        if not await self.exists(tenant_id, conversation_id):
            return False
        await self.session.execute(
            delete(ConversationItem).where(
                ConversationItem.conversation_id == conversation_id,
                ConversationItem.tenant_id == tenant_id,
            )
        )
        # Explicit rather than left to ON DELETE SET NULL, so it does not depend on
        # SQLite's foreign-key pragma being on for this connection.
        await self.session.execute(
            update(Response)
            .where(Response.conversation_id == conversation_id, Response.tenant_id == tenant_id)
            .values(conversation_id=None)
        )
        await self.session.execute(
            delete(Conversation).where(
                Conversation.id == conversation_id, Conversation.tenant_id == tenant_id
            )
        )
        return True

    async def append(
        self, tenant_id: str, conversation_id: str, items: Sequence[NewConversationItem]
    ) -> int | None:
        """Appends items after everything already there; returns the first new position,
        or None when the conversation does not exist.

        The claim is one ``UPDATE ... RETURNING``: it takes the row's write lock (on
        PostgreSQL; SQLite writers are serialized by ``BEGIN IMMEDIATE``), so callers
        may check the conversation's items after it and before inserting.
        """
        claimed = await self.session.execute(
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.tenant_id == tenant_id)
            .values(
                next_position=Conversation.next_position + len(items),
                version=Conversation.version + 1,
                updated_at=utcnow(),
            )
            .returning(Conversation.next_position)
        )
        end = claimed.scalar_one_or_none()
        if end is None:
            return None
        return int(end) - len(items)

    async def insert_items(
        self,
        tenant_id: str,
        conversation_id: str,
        start: int,
        items: Sequence[NewConversationItem],
    ) -> None:
        """Inserts items at positions claimed by ``append``."""
        await self._insert_items(conversation_id, tenant_id, start, items, response_id=None)

    async def advance(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        read_version: int,
        start: int,
        items: Sequence[NewConversationItem],
        response_id: str,
    ) -> bool:
        """Appends a turn's items and makes its response the head, only if the
        conversation is still at ``read_version`` (with ``start`` its next position then).
        False means another change won; nothing was written.

        On PostgreSQL a concurrent UPDATE of the same row waits for the first to commit,
        then re-checks ``version`` against the new row and matches nothing.
        """
        result = await self.session.execute(
            update(Conversation)
            .where(
                Conversation.id == conversation_id,
                Conversation.tenant_id == tenant_id,
                Conversation.version == read_version,
            )
            .values(
                next_position=start + len(items),
                version=read_version + 1,
                head_response_id=response_id,
                updated_at=utcnow(),
            )
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return False
        await self._insert_items(conversation_id, tenant_id, start, items, response_id=response_id)
        return True

    async def items(
        self, tenant_id: str, conversation_id: str, *, before_position: int | None = None
    ) -> Sequence[StoredConversationItem]:
        """Items in position order, optionally only those before a position."""
        query = (
            select(*_ITEM_COLUMNS)
            .where(
                ConversationItem.conversation_id == conversation_id,
                ConversationItem.tenant_id == tenant_id,
            )
            .order_by(ConversationItem.position)
        )
        if before_position is not None:
            query = query.where(ConversationItem.position < before_position)
        return [StoredConversationItem(*row) for row in (await self.session.execute(query)).all()]

    async def page(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        after_position: int | None,
        limit: int,
        descending: bool,
    ) -> Sequence[StoredConversationItem]:
        query = select(*_ITEM_COLUMNS).where(
            ConversationItem.conversation_id == conversation_id,
            ConversationItem.tenant_id == tenant_id,
        )
        query = by_position(
            query,
            ConversationItem.position,
            after_position=after_position,
            limit=limit,
            descending=descending,
        )
        return [StoredConversationItem(*row) for row in (await self.session.execute(query)).all()]

    async def item(
        self, tenant_id: str, conversation_id: str, item_id: str
    ) -> StoredConversationItem | None:
        query = select(*_ITEM_COLUMNS).where(
            ConversationItem.conversation_id == conversation_id,
            ConversationItem.tenant_id == tenant_id,
            ConversationItem.item_id == item_id,
        )
        row = (await self.session.execute(query)).first()
        return None if row is None else StoredConversationItem(*row)

    async def taken_ids(
        self, tenant_id: str, conversation_id: str, item_ids: Sequence[str]
    ) -> set[str]:
        """Which of these ids the conversation already holds."""
        if not item_ids:
            return set()
        query = select(ConversationItem.item_id).where(
            ConversationItem.conversation_id == conversation_id,
            ConversationItem.tenant_id == tenant_id,
            ConversationItem.item_id.in_(list(item_ids)),
        )
        return set((await self.session.execute(query)).scalars().all())

    async def remove_item(self, tenant_id: str, conversation_id: str, item_id: str) -> bool:
        """Deletes one item (its position stays unused) and bumps the version."""
        result = await self.session.execute(
            delete(ConversationItem).where(
                ConversationItem.conversation_id == conversation_id,
                ConversationItem.tenant_id == tenant_id,
                ConversationItem.item_id == item_id,
            )
        )
        if not result.rowcount:  # type: ignore[attr-defined]
            return False
        await self.session.execute(
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.tenant_id == tenant_id)
            .values(version=Conversation.version + 1, updated_at=utcnow())
        )
        return True

    async def head_response(self, tenant_id: str, conversation: Conversation) -> Response | None:
        """The conversation's latest committed turn, deleted or not (it is still the
        lineage parent of the next turn)."""
        if conversation.head_response_id is None:
            return None
        query = select(Response).where(
            Response.id == conversation.head_response_id, Response.tenant_id == tenant_id
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def _insert_items(
        self,
        conversation_id: str,
        tenant_id: str,
        start: int,
        items: Sequence[NewConversationItem],
        *,
        response_id: str | None,
    ) -> None:
        if not items:
            return
        now = utcnow()
        await self.session.execute(
            insert(ConversationItem),
            [
                {
                    "conversation_id": conversation_id,
                    "position": start + offset,
                    "tenant_id": tenant_id,
                    "item_id": item.item_id,
                    "type": item.type,
                    "data": item.data,
                    "response_id": response_id,
                    "created_at": now,
                }
                for offset, item in enumerate(items)
            ],
        )
