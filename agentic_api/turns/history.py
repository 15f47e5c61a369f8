"""Rehydration: the exact model-visible history of a stored response, verified.

Fail closed: the stored prefix digest and item count are recomputed from the rows; any
difference (a missing, altered, reordered or undecodable item) refuses the turn rather
than sending the model a history that differs from the one it saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import orjson

from agentic_api.errors import CheckpointInvalid
from agentic_api.log import get_logger
from agentic_api.storage.models import Response
from agentic_api.storage.responses import ResponseRepository, StoredItem
from agentic_api.wire.items import Item
from lineage import digest_chain

log = get_logger("agentic_api.turns.history")


def salt_identity(tenant_id: str, salt_epoch: int) -> str:
    """What the prefix digest binds to: the tenant's salt by identity, not by value.

    Binding to (tenant, epoch) rather than the HMAC output keeps stored digests
    verifiable if the operator ever has to replace the server secret.
    """
    return f"{tenant_id}#{salt_epoch}"


async def load_history(repo: ResponseRepository, parent: Response) -> list[Item]:
    rows = await repo.chain_items(parent.tenant_id, parent.id)
    items = [_decode(parent, row) for row in rows]
    verify(parent, items)
    return items


def verify(parent: Response, items: Sequence[Item]) -> list[str]:
    """Checks items against the parent's checkpoint; returns the digest chain."""
    if len(items) != parent.history_item_count:
        _refuse(parent, f"expected {parent.history_item_count} items, found {len(items)}")
    chain = digest_chain(
        parent.model, salt_identity(parent.tenant_id, parent.salt_epoch), (i.data for i in items)
    )
    computed = chain[-1] if chain else None
    if parent.prefix_digest is None or computed != parent.prefix_digest:
        _refuse(parent, "the prefix digest does not match the stored items")
    return chain


def _decode(parent: Response, row: StoredItem) -> Item:
    try:
        value = orjson.loads(row.data)
    except orjson.JSONDecodeError:
        _refuse(parent, f"item {row.item_id} of {row.response_id} is not valid JSON")
    if not isinstance(value, dict) or value.get("type") != row.type:
        _refuse(parent, f"item {row.item_id} of {row.response_id} has an unexpected type")
    return Item(id=row.item_id, type=row.type, data=row.data.encode())


def _refuse(parent: Response, reason: str) -> NoReturn:
    log.error("checkpoint invalid", response_id=parent.id, reason=reason)
    raise CheckpointInvalid(
        f"The stored history of response '{parent.id}' failed verification ({reason}); "
        "refusing to continue from it.",
        param="previous_response_id",
    )
