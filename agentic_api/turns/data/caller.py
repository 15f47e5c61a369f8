"""Who a turn is for, and a turn whose identity was fixed before it was prepared."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentic_api.wire.items import Item


@dataclass(frozen=True)
class Caller:
    """The authenticated tenant, as the turn pipeline needs it."""

    tenant_id: str
    salt_epoch: int
    cache_salt: str = field(repr=False)


@dataclass(frozen=True)
class Reservation:
    """A turn whose identity was fixed earlier: a background job, enqueued (response id,
    creation time, input items with their ids and bytes) by the request that made it and
    prepared again when a worker runs it. Its row exists; the commit completes it."""

    response_id: str
    created_at: int
    new_input: list[Item]
