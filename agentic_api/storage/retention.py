"""Queries of the retention sweep (``background/retention.py``): which stored rows are old
enough to go, and their deletion, a bounded batch at a time. Nothing here commits.

The rule that keeps chains whole: a response goes only when no stored response continues
from it (``previous_response_id``). An old chain is therefore pruned from its newest end
back, one generation per batch, and a chain with any descendant younger than the cutoff
keeps every ancestor. Each deletion checks the rule again in its own statement, so a
continuation committed between the choice and the deletion keeps its parent.

A multi-agent response and the subagents its tree stored (``responses.spawned_by``) are
one unit: they go together, in one statement, and only when nothing continues from any of
them (a subagent is never pruned alone, nor its root while a continuation of the subagent
lives). A subagent whose root is already gone (pruned before this rule) goes on its own.
Done here, not by a foreign key on ``spawned_by`` with ON DELETE CASCADE: a cascade would
take a subagent something continues from, would not serve ``DELETE /v1/responses`` (which
only marks rows deleted), and adding it on SQLite means a batch recreate of ``responses``,
whose dropped old table cascades to every response's events and items.

Deleting a response deletes what hangs off it (items, events, token artifacts, its
agents' rounds, its background job) through the schema's ``ON DELETE CASCADE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, and_, delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from agentic_api.storage.models import Conversation, MessageTurn, Response
from agentic_api.wire.events import TERMINAL_STATUSES

_child = aliased(Response)
_member = aliased(Response)
_root = aliased(Response)


def _tree_of(row: Any) -> Any:
    """The id of the multi-agent tree ``row`` belongs to: its root's id (its own, for a
    root or any other response)."""
    return func.coalesce(row.spawned_by, row.id)


def _tree_continued(row: Any) -> Any:
    """Some stored response continues from ``row`` or from another response of its tree
    (the root and the subagents it stored)."""
    tree = _tree_of(row)
    return (
        select(_member.id)
        .join(_child, _child.previous_response_id == _member.id)
        .where(or_(_member.id == tree, _member.spawned_by == tree))
        .exists()
    )


def _alone_or_root(row: Any) -> Any:
    """``row`` is not a subagent, or one whose root no longer exists."""
    return or_(
        row.spawned_by.is_(None),
        ~select(_root.id).where(_root.id == row.spawned_by).exists(),
    )


class RetentionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def old_responses(self, cutoff: datetime, limit: int) -> list[str]:
        """Up to ``limit`` responses created before ``cutoff``, oldest first, that may go:
        finished (a queued or running one is still someone's work), outside any stored
        conversation (a conversation keeps its turns while it lives), not a subagent (it
        goes with its root), and continued by no stored response, nor any of its tree's
        subagents."""
        query = (
            select(Response.id)
            .where(
                Response.created_at < cutoff,
                Response.status.in_(TERMINAL_STATUSES),
                Response.conversation_id.is_(None),
                _alone_or_root(Response),
                ~_tree_continued(Response),
            )
            .order_by(Response.created_at)
            .limit(limit)
        )
        return list((await self.session.execute(query)).scalars())

    async def delete_responses(self, response_ids: Sequence[str]) -> int:
        """Deletes those of ``response_ids`` that nothing continues from now, with the
        subagents their trees stored: one statement, so the rule is read once for the
        whole tree (no root goes while a continuation of its subagent commits, nor the
        other way round). Returns how many rows went, subagents included."""
        if not response_ids:
            return 0
        result = await self.session.execute(
            delete(Response).where(
                or_(Response.id.in_(response_ids), Response.spawned_by.in_(response_ids)),
                ~_tree_continued(Response),
            )
        )
        return int(cast(CursorResult[Any], result).rowcount)

    async def old_conversations(self, cutoff: datetime, limit: int) -> list[str]:
        """Up to ``limit`` conversations last changed before ``cutoff``, oldest first,
        none of whose responses is still running, younger than ``cutoff``, or continued
        by a response outside the conversation (a chain someone forked from it), nor has
        a subagent some response continues from."""
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
        # A subagent of one of its turns (stored outside the conversation) that some
        # response continues from keeps the conversation too.
        sub = aliased(Response)
        sub_continued = (
            select(turn.id)
            .join(sub, sub.spawned_by == turn.id)
            .join(_child, _child.previous_response_id == sub.id)
            .where(turn.conversation_id == Conversation.id)
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
            .where(Conversation.updated_at < cutoff, ~live, ~forked, ~sub_continued)
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
        # The turns' subagents first (they are found through their roots).
        turns = select(Response.id).where(Response.conversation_id.in_(gone))
        await self.session.execute(delete(Response).where(Response.spawned_by.in_(turns)))
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
