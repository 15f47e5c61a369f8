"""A turn inside a conversation: what it reads before the model runs, and the
optimistic append it makes when it commits.

The turn reads the conversation's version and next position with its history; its
commit appends input then output items from that position and bumps the version only
if nobody changed the item sequence in between. A turn that loses gets a 409
``conversation_conflict`` and nothing of it is stored (its response row is in the same
transaction). ``store: false`` reads the conversation as history but appends nothing:
such a turn leaves no trace, in the conversation or anywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.conversations import ConversationRepository, NewConversationItem
from agentic_api.storage.database import Database
from agentic_api.storage.models import Response
from agentic_api.turns.data.prepared import ConversationState
from agentic_api.turns.prepare.errors import conversation_conflict, conversation_not_found
from agentic_api.turns.prepare.history import conversation_history
from agentic_api.wire.items import Item


@dataclass(frozen=True)
class ConversationContext:
    state: ConversationState
    history: list[Item]
    # The latest committed turn: the new turn's lineage parent (for depth and the
    # fingerprint diff), although not a previous_response_id.
    head: Response | None


async def load_conversation(
    db: Database, tenant_id: str, conversation_id: str
) -> ConversationContext:
    async with db.turn_read() as session:
        repo = ConversationRepository(session)
        conversation = await repo.get(tenant_id, conversation_id)
        if conversation is None:
            raise conversation_not_found(conversation_id, param="conversation")
        # Only what existed at the version read: an append committed between these two
        # queries belongs to a later version, which this turn's commit will lose to.
        rows = await repo.items(
            tenant_id, conversation.id, before_position=conversation.next_position
        )
        head = await repo.head_response(tenant_id, conversation)
    history = conversation_history(conversation.id, rows)
    state = ConversationState(conversation.id, conversation.version, conversation.next_position)
    return ConversationContext(state=state, history=history, head=head)


async def append_turn(
    session: AsyncSession,
    tenant_id: str,
    state: ConversationState,
    response_id: str,
    items: Sequence[NewConversationItem],
) -> None:
    """Appends a committed turn's items and makes it the head, or raises if the
    conversation moved on (or went away) since the turn read it."""
    repo = ConversationRepository(session)
    advanced = await repo.advance(
        tenant_id,
        state.id,
        read_version=state.version,
        start=state.next_position,
        items=items,
        response_id=response_id,
    )
    if advanced:
        return
    if not await repo.exists(tenant_id, state.id):
        raise conversation_not_found(state.id, param="conversation")
    raise conversation_conflict(state.id)
