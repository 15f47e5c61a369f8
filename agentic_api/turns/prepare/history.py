"""Rehydration: the exact model-visible history of a stored response, verified.

Fail closed: the stored prefix digest and item count are recomputed from the rows; any
difference (a missing, altered, reordered or undecodable item) refuses the turn rather
than sending the model a history that differs from the one it saw.

Conversation turns never have a ``previous_response_id`` (the two are exclusive), so a
turn made inside a conversation is always the root of any chain continued from it. Its
history lives in the conversation: the conversation's items up to and including that
turn's output (positions below ``conversation_position + input + output``), as they are
*now*. Items appended later sit above that range and do not matter; an item deleted
from the range since makes the chain uncontinuable (409 ``conversation_history_changed``),
as does deleting the conversation. A count that matches with a digest that does not is
corruption and stays ``checkpoint_invalid``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import orjson

from agentic_api.errors import CheckpointInvalid
from agentic_api.log import get_logger
from agentic_api.storage.conversations import ConversationRepository, StoredConversationItem
from agentic_api.storage.models import Response
from agentic_api.storage.responses import ResponseRepository, StoredItem
from agentic_api.storage.verified_histories import KeptAncestor
from agentic_api.turns.prepare.errors import conversation_history_changed
from agentic_api.wire.items import Item
from lineage import IdKind, extend_digest, id_kind, prefix_digest

log = get_logger("agentic_api.turns.history")


def salt_identity(tenant_id: str, salt_epoch: int) -> str:
    """What the prefix digest binds to: the tenant's salt by identity, not by value.

    Binding to (tenant, epoch) rather than the HMAC output keeps stored digests
    verifiable if the operator ever has to replace the server secret.
    """
    return f"{tenant_id}#{salt_epoch}"


async def load_history(repo: ResponseRepository, parent: Response) -> list[Item]:
    chain = await repo.chain_items(parent.tenant_id, parent.id)
    rows: Sequence[StoredItem | StoredConversationItem] = chain
    # A chain inherits its session from its root, and a conversation turn's session is
    # its conversation's id: only such chains need the root looked up (a wrong guess
    # either way still ends in the count and digest checks below).
    if id_kind(parent.session_id) is IdKind.CONVERSATION:
        rows = await _with_conversation_prefix(repo, parent, chain)
    items = [_decode(parent, row.item_id, row.type, row.data) for row in rows]
    verify(parent, items)
    return items


async def _with_conversation_prefix(
    repo: ResponseRepository, parent: Response, rows: Sequence[StoredItem]
) -> Sequence[StoredItem | StoredConversationItem]:
    """The chain's items with its root's part replaced by the root's conversation range."""
    root = parent if parent.previous_response_id is None else None
    root = root or await repo.chain_root(parent.tenant_id, parent.id)
    if root is None or root.conversation_position is None:
        return rows
    if root.conversation_id is None:
        raise conversation_history_changed(parent.id, "its conversation was deleted")
    end = root.conversation_position + root.input_item_count + root.output_item_count
    earlier = await ConversationRepository(repo.session).items(
        parent.tenant_id, root.conversation_id, before_position=end
    )
    later = [row for row in rows if row.response_id != root.id]
    if len(earlier) + len(later) != parent.history_item_count:
        raise conversation_history_changed(
            parent.id, f"items up to response '{root.id}' were deleted from the conversation"
        )
    return [*earlier, *later]


async def load_history_since(
    repo: ResponseRepository, parent: Response, ancestor: KeptAncestor
) -> tuple[list[Item], bool]:
    """The parent's verified history when ``ancestor``'s is already verified in this
    process: only the turns after it are read, and checked by extending its digest with
    them (the digest is a hash chain, so that equals recomputing it from the root).
    Whether the ancestor was used is returned with it: when the walk does not meet it
    (another branch of the session), what was read is the whole chain, verified as
    ``load_history`` does."""
    since = await repo.chain_items_since(parent.tenant_id, parent.id, ancestor.response_id)
    read = [_decode(parent, row.item_id, row.type, row.data) for row in since.items]
    if not since.reached:
        verify(parent, read)
        return read, False
    items = [*ancestor.items, *read]
    if len(items) != parent.history_item_count:
        _refuse(parent, f"expected {parent.history_item_count} items, found {len(items)}")
    extended = extend_digest(ancestor.digest, (item.data for item in read))
    if parent.prefix_digest is None or extended != parent.prefix_digest:
        # Not necessarily corruption: the tenant's salt may have changed between the two
        # turns, which changes every link. The whole history decides, as without it.
        verify(parent, items)
    return items, True


def verify(parent: Response, items: Sequence[Item]) -> None:
    """Checks items against the parent's checkpoint: same count, same prefix digest."""
    if len(items) != parent.history_item_count:
        _refuse(parent, f"expected {parent.history_item_count} items, found {len(items)}")
    computed = prefix_digest(
        parent.model, salt_identity(parent.tenant_id, parent.salt_epoch), (i.data for i in items)
    )
    if parent.prefix_digest is None or computed != parent.prefix_digest:
        _refuse(parent, "the prefix digest does not match the stored items")


def conversation_history(
    conversation_id: str, rows: Sequence[StoredConversationItem]
) -> list[Item]:
    """A conversation's stored items as the next turn replays them (verbatim bytes)."""
    items: list[Item] = []
    for row in rows:
        reason = decode_problem(row.item_id, row.type, row.data)
        if reason is not None:
            log.error("conversation item invalid", conversation_id=conversation_id, reason=reason)
            raise CheckpointInvalid(
                f"The stored history of conversation '{conversation_id}' failed "
                f"verification ({reason}); refusing to continue it.",
                param="conversation",
            )
        items.append(Item(id=row.item_id, type=row.type, data=row.data.encode()))
    return items


def decode_problem(item_id: str, item_type: str, data: str) -> str | None:
    """Why a stored item cannot be replayed, or None when it can."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return f"item {item_id} is not valid JSON"
    if not isinstance(value, dict) or value.get("type") != item_type:
        return f"item {item_id} has an unexpected type"
    return None


def _decode(parent: Response, item_id: str, item_type: str, data: str) -> Item:
    reason = decode_problem(item_id, item_type, data)
    if reason is not None:
        _refuse(parent, reason)
    return Item(id=item_id, type=item_type, data=data.encode())


def _refuse(parent: Response, reason: str) -> NoReturn:
    log.error("checkpoint invalid", response_id=parent.id, reason=reason)
    raise CheckpointInvalid(
        f"The stored history of response '{parent.id}' failed verification ({reason}); "
        "refusing to continue from it.",
        param="previous_response_id",
    )
