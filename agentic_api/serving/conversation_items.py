"""``POST /v1/conversations/{id}/items``: appending items, with an ``Idempotency-Key``.

One transaction holds the key's claim, the append and the recorded outcome: a failed
append rolls the claim back with it, so a retry runs.
"""

from __future__ import annotations

from typing import Any

from agentic_api import idempotency
from agentic_api.idempotency import Claim
from agentic_api.runtime import Runtime
from agentic_api.serving.results import Replayed, replayed
from agentic_api.storage.conversations import ConversationRepository, NewConversationItem
from agentic_api.storage.idempotency import KeyRef, Outcome
from agentic_api.turns.prepare.errors import conversation_not_found
from agentic_api.wire.conversations import duplicate_item, item_list
from agentic_api.wire.items import Item
from agentic_api.wire.listing import present_item
from agentic_api.wire.requests import parse_json_object


def new_items(items: list[Item]) -> list[NewConversationItem]:
    return [NewConversationItem(i.id, i.type, i.data.decode()) for i in items]


async def append_items(
    services: Runtime,
    tenant_id: str,
    conversation_id: str,
    items: list[Item],
    raw: bytes,
    *,
    key: str | None,
) -> Replayed | dict[str, Any]:
    """The added items' list object (or the outcome a retry replays). ``raw``: the
    request's body (an Idempotency-Key's request hash); ``key``: the key, checked."""
    async with services.db.write() as session:
        claim: Claim | None = None
        if key is not None:
            claimed = await idempotency.claim_in(
                session,
                services.db,
                KeyRef(tenant_id, idempotency.CONVERSATION_ITEMS, key),
                idempotency.request_hash(
                    {"conversation_id": conversation_id, "body": parse_json_object(raw)}
                ),
                ttl_seconds=services.settings.idempotency_ttl_seconds,
                lease_seconds=services.settings.lease_seconds,
            )
            if isinstance(claimed, Outcome):
                return replayed(services.db, claimed)
            claim = claimed
        repo = ConversationRepository(session)
        start = await repo.append(tenant_id, conversation_id, new_items(items))
        if start is None:
            raise conversation_not_found(conversation_id)
        # Checked after the claim, which holds the conversation's write lock, so two
        # appends of the same id cannot both pass; raising rolls the claim back.
        taken = await repo.taken_ids(tenant_id, conversation_id, [i.id for i in items])
        for index, item in enumerate(items):
            if item.id in taken:
                raise duplicate_item(item.id, f"items[{index}].id")
        await repo.insert_items(tenant_id, conversation_id, start, new_items(items))
        data = [present_item(item.as_dict()) for item in items]
        result = item_list(data, [item.id for item in items])
        if claim is not None:
            await claim.complete_in(session, Outcome("json", 200, result, None))
    return result
