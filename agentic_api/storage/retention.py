"""Queries of the retention sweep (``background/retention.py``): which stored rows are old
enough to go, and their deletion, a bounded batch at a time. Nothing here commits.

The rule that keeps chains whole: a response goes only when no stored response continues
from it (``previous_response_id``). An old chain is therefore pruned from its newest end
back, one generation per batch, and a chain with any descendant younger than the cutoff
keeps every ancestor. Each deletion checks the rule again in its own statement, so a
continuation committed between the choice and the deletion keeps its parent.

Deleting a response deletes what hangs off it (items, events, token artifacts, its
background job) through the schema's ``ON DELETE CASCADE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, and_, delete, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from agentic_api.storage.models import Conversation, MessageTurn, Response
from agentic_api.wire.events import TERMINAL_STATUSES

_child = aliased(Response)


def _continued(parent: Any) -> Any:
    """Some stored response continues from ``parent``."""
    return exists().where(_child.previous_response_id == parent.id)


class RetentionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def old_responses(self, cutoff: datetime, limit: int) -> list[str]:
        """Up to ``limit`` responses created before ``cutoff``, oldest first, that may go:
        finished (a queued or running one is still someone's work), outside any stored
        conversation (a conversation keeps its turns while it lives), and continued by
        no stored response."""
        query = (
            select(Response.id)
            .where(
                Response.created_at < cutoff,
                Response.status.in_(TERMINAL_STATUSES),
                Response.conversation_id.is_(None),
                ~_continued(Response),
            )
            .order_by(Response.created_at)
            .limit(limit)
        )
        return list((await self.session.execute(query)).scalars())

    async def delete_responses(self, response_ids: Sequence[str]) -> int:
        """Deletes those of ``response_ids`` that nothing continues from now."""
        if not response_ids:
            return 0
        result = await self.session.execute(
            delete(Response).where(Response.id.in_(response_ids), ~_continued(Response))
        )
        return int(cast(CursorResult[Any], result).rowcount)

    async def old_conversations(self, cutoff: datetime, limit: int) -> list[str]:
        """Up to ``limit`` conversations last changed before ``cutoff``, oldest first,
        none of whose responses is still running, younger than ``cutoff``, or continued
        by a response outside the conversation (a chain someone forked from it)."""
        turn = aliased(Response)
        forked = (
            select(turn.id)
            .join(_child, _child.previous_response_id == turn.id)
            .where(
                turn.conversation_id == Conversation.id,
                or_(
                    _child.conversation_id.is_(None),
                    _child.conversation_id != Conversation.id,
                ),
            )
            .exists()
        )
        live = (
            select(turn.id)
            .where(
                turn.conversation_id == Conversation.id,
                or_(turn.created_at >= cutoff, turn.status.not_in(TERMINAL_STATUSES)),
            )
            .exists()
        )
        query = (
            select(Conversation.id)
            .where(Conversation.updated_at < cutoff, ~live, ~forked)
            .order_by(Conversation.updated_at)
            .limit(limit)
        )
        return list((await self.session.execute(query)).scalars())

    async def delete_conversations(self, conversation_ids: Sequence[str], cutoff: datetime) -> int:
        """Deletes the conversations with their items and responses, checking again in
        the statement that each is still unchanged since before ``cutoff``."""
        if not conversation_ids:
            return 0
        # Locked (PostgreSQL; SQLite's write transaction holds the whole database): a
        # turn committing to one of them waits, then finds it gone.
        still_old = (
            select(Conversation.id)
            .where(Conversation.id.in_(conversation_ids), Conversation.updated_at < cutoff)
            .with_for_update()
        )
        gone = list((await self.session.execute(still_old)).scalars())
        if not gone:
            return 0
        await self.session.execute(delete(Response).where(Response.conversation_id.in_(gone)))
        result = await self.session.execute(
            delete(Conversation).where(
                and_(Conversation.id.in_(gone), Conversation.updated_at < cutoff)
            )
        )
        return int(cast(CursorResult[Any], result).rowcount)

    async def delete_old_message_turns(self, cutoff: datetime, limit: int) -> int:
        """Up to ``limit`` recorded Anthropic Messages turns made before ``cutoff``."""
        oldest = (
            select(MessageTurn.id)
            .where(MessageTurn.created_at < cutoff)
            .order_by(MessageTurn.created_at)
            .limit(limit)
        )
        ids = list((await self.session.execute(oldest)).scalars())
        if not ids:
            return 0
        result = await self.session.execute(delete(MessageTurn).where(MessageTurn.id.in_(ids)))
        return int(cast(CursorResult[Any], result).rowcount)
