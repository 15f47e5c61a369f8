"""Queries over responses, their items and their stored event streams (tenant-scoped)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import (
    CTE,
    and_,
    bindparam,
    delete,
    func,
    insert,
    inspect,
    literal,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import BindParameter

from agentic_api.storage.models import (
    AgentRoundRow,
    Response,
    ResponseEvent,
    ResponseItem,
    TokenArtifactRow,
)
from agentic_api.storage.pagination import by_position
from agentic_api.storage.turn_rows import (
    LIVE_CHECKPOINT,
    LIVE_RESPONSE,
    EventJson,
    NewItem,
    event_values,
    item_values,
    response_values,
    stored_events,
)
from agentic_api.storage.types import utcnow

# Callers hand the repository NewItem; it is defined with the rows a turn writes.
__all__ = ["NewItem", "ResponseRepository", "StoredItem"]

# The number of the last event an event row holds (one row may hold a run of them).
last_of_row = func.coalesce(ResponseEvent.last_sequence_number, ResponseEvent.sequence_number)

# Identity, creation time and deletion of a reserved row outlive its completion.
_KEPT_ON_COMPLETION = frozenset({"id", "tenant_id", "created_at", "deleted_at"})


@dataclass(frozen=True)
class StoredItem:
    """One item row as read back; its fields name the columns selected, in order."""

    response_id: str
    position: int
    item_id: str
    role: str
    type: str
    data: str


_ITEM_COLUMNS = tuple(getattr(ResponseItem, field.name) for field in fields(StoredItem))
_ITEM_FIELDS = len(_ITEM_COLUMNS)


@dataclass(frozen=True)
class ChainSince:
    """A chain's items after a known ancestor, and whether the walk reached it."""

    items: Sequence[StoredItem]
    reached: bool


class ResponseRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(
        self, tenant_id: str, response_id: str, *, documents: bool = True
    ) -> Response | None:
        """A live (not deleted) response of this tenant.

        ``documents=False`` leaves out the stored object and request, which a continuation
        does not need and which are the largest part of the row."""
        params = {"tenant_id": tenant_id, "response_id": response_id}
        if documents:
            return (await self.session.execute(LIVE_RESPONSE, params)).scalar_one_or_none()
        # A continuation only reads the row, once, so it skips the ORM's identity map and
        # loading machinery: a plain row turned into a detached Response.
        connection = await self.session.connection()
        row = (await connection.execute(LIVE_CHECKPOINT, params)).first()
        return None if row is None else Response(**row._mapping)

    async def chain_items(self, tenant_id: str, response_id: str) -> Sequence[StoredItem]:
        """Every item of a response and its ancestors, oldest turn first, in one query.

        The ancestor walk is a recursive CTE, so the number of round trips does not
        grow with the depth of the chain. Deleted ancestors still contribute their
        items: deleting a response hides it, it does not rewrite its descendants' past.
        """
        connection = await self.session.connection()
        result = await connection.execute(
            _CHAIN_ITEMS, {"tenant_id": tenant_id, "response_id": response_id}
        )
        return [StoredItem(*row) for row in result.all()]

    async def chain_items_since(
        self, tenant_id: str, response_id: str, ancestor_id: str
    ) -> ChainSince:
        """The items of a response and its ancestors up to, not including, ``ancestor_id``
        (oldest turn first), in one query; ``reached`` says whether the walk met that
        ancestor. When it did not (``ancestor_id`` is on another branch, or no ancestor
        at all), the items are the whole chain's, as ``chain_items`` reads them."""
        connection = await self.session.connection()
        params = {"tenant_id": tenant_id, "response_id": response_id, "ancestor_id": ancestor_id}
        rows = (await connection.execute(_CHAIN_ITEMS_SINCE, params)).all()
        # Rows come oldest turn first; a turn with no items still has its row (outer join).
        reached = bool(rows) and rows[0].previous_response_id == ancestor_id
        items = [StoredItem(*row[:_ITEM_FIELDS]) for row in rows if row.item_id is not None]
        return ChainSince(items, reached)

    async def chain_root(self, tenant_id: str, response_id: str) -> Response | None:
        """The oldest ancestor of a response (itself when it has no parent), deleted
        or not: where its ``previous_response_id`` chain begins."""
        params = {"tenant_id": tenant_id, "response_id": response_id}
        return (await self.session.execute(_CHAIN_ROOT, params)).scalar_one_or_none()

    async def insert(self, response: Response, items: Sequence[NewItem]) -> None:
        # A plain INSERT of the attributes set (the ORM's unit of work costs more than the
        # statement on every turn); unset columns take their defaults as with session.add.
        connection = await self.session.connection()
        await connection.execute(insert(Response), response_values(response))
        await self._insert_items(response.id, response.tenant_id, 0, items)

    async def _insert_items(
        self, response_id: str, tenant_id: str, first_position: int, items: Sequence[NewItem]
    ) -> None:
        if items:
            connection = await self.session.connection()
            await connection.execute(
                insert(ResponseItem), item_values(response_id, tenant_id, first_position, items)
            )

    async def get_any(self, tenant_id: str, response_id: str) -> Response | None:
        """A response of this tenant, deleted or not (a queued job still runs it)."""
        query = select(Response).where(Response.id == response_id, Response.tenant_id == tenant_id)
        return (await self.session.execute(query)).scalar_one_or_none()

    async def lock(self, response_id: str) -> Response | None:
        """The row, locked until the transaction ends (SQLite: its writers are serialized).

        ``FOR NO KEY UPDATE`` so that event inserts (whose foreign key check only takes a
        key-share lock) are not blocked; every writer of a background response takes this
        lock before the job row, so cancels, recoveries and commits cannot deadlock.
        """
        query = (
            select(Response)
            .where(Response.id == response_id)
            .with_for_update(key_share=True)
            .execution_options(populate_existing=True)
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def status_of(self, response_id: str) -> str | None:
        query = select(Response.status).where(Response.id == response_id)
        return (await self.session.execute(query)).scalar_one_or_none()

    async def stored_input(self, response_id: str) -> Sequence[StoredItem]:
        query = (
            select(*_ITEM_COLUMNS)
            .where(ResponseItem.response_id == response_id, ResponseItem.role == "input")
            .order_by(ResponseItem.position)
        )
        return [StoredItem(*row) for row in (await self.session.execute(query)).all()]

    async def complete_reserved(
        self, response: Response, items: Sequence[NewItem], *, first_position: int
    ) -> None:
        """Finishes a row inserted earlier (a background job's, with its input items):
        every column takes the new row's value, and ``items`` follow the stored ones.
        ``deleted_at`` is kept: a response deleted while queued stays deleted."""
        values = {
            attr.key: getattr(response, attr.key)
            for attr in inspect(Response).column_attrs
            if attr.key not in _KEPT_ON_COMPLETION
        }
        await self.session.execute(
            update(Response).where(Response.id == response.id).values(**values)
        )
        await self._insert_items(response.id, response.tenant_id, first_position, items)

    async def set_state(
        self,
        response_id: str,
        *,
        status: str,
        body: dict[str, Any],
        error: dict[str, Any] | None = None,
    ) -> None:
        await self.session.execute(
            update(Response)
            .where(Response.id == response_id)
            .values(status=status, body=body, error=error, updated_at=utcnow())
        )

    async def last_sequence(self, response_id: str) -> int:
        """The highest stored event sequence number, -1 when there is none."""
        query = select(func.max(last_of_row)).where(ResponseEvent.response_id == response_id)
        found = (await self.session.execute(query)).scalar_one_or_none()
        return -1 if found is None else int(found)

    async def add_events(self, response_id: str, events: Sequence[EventJson]) -> None:
        if events:
            await self.session.execute(insert(ResponseEvent), event_values(response_id, events))

    async def events(self, response_id: str, after: int | None) -> Sequence[tuple[int, str]]:
        query = (
            select(
                ResponseEvent.sequence_number,
                ResponseEvent.last_sequence_number,
                ResponseEvent.data,
            )
            .where(ResponseEvent.response_id == response_id)
            .order_by(ResponseEvent.sequence_number)
        )
        if after is not None:
            query = query.where(last_of_row > after)
        rows = (await self.session.execute(query)).all()
        return stored_events([(first, last, data) for first, last, data in rows], after)

    async def input_items(
        self,
        response_id: str,
        *,
        after_position: int | None,
        limit: int,
        descending: bool,
    ) -> Sequence[StoredItem]:
        query = select(*_ITEM_COLUMNS).where(
            ResponseItem.response_id == response_id, ResponseItem.role == "input"
        )
        query = by_position(
            query,
            ResponseItem.position,
            after_position=after_position,
            limit=limit,
            descending=descending,
        )
        rows = (await self.session.execute(query)).all()
        return [StoredItem(*row) for row in rows]

    async def item_position(self, response_id: str, item_id: str) -> int | None:
        query = select(ResponseItem.position).where(
            ResponseItem.response_id == response_id, ResponseItem.item_id == item_id
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def mark_deleted(self, tenant_id: str, response_id: str) -> list[str] | None:
        """Marks a response deleted with the subagents its multi-agent tree stored (a tree
        is stored whole and goes whole); returns the ids marked, the response's first, or
        None when there is no live response ``response_id`` that is not itself a subagent
        (a subagent goes only with its root: ``serving/responses.py`` refuses it)."""
        now = utcnow()
        result = await self.session.execute(
            update(Response)
            .where(
                Response.id == response_id,
                Response.tenant_id == tenant_id,
                Response.deleted_at.is_(None),
                Response.spawned_by.is_(None),
            )
            .values(deleted_at=now, updated_at=now)
        )
        if not result.rowcount:  # type: ignore[attr-defined]
            return None
        subagents = list(
            (
                await self.session.execute(
                    update(Response)
                    .where(
                        Response.spawned_by == response_id,
                        Response.tenant_id == tenant_id,
                        Response.deleted_at.is_(None),
                    )
                    .values(deleted_at=now, updated_at=now)
                    .returning(Response.id)
                )
            ).scalars()
        )
        gone = [response_id, *subagents]
        # Their items stay (a descendant's history still replays them). Their stored
        # streams are only for replaying them, their token ids only for accounting their
        # continuations (which can no longer be made), the tree's per-agent rounds only
        # for showing them: those go with them.
        for table, column in (
            (ResponseEvent, ResponseEvent.response_id),
            (TokenArtifactRow, TokenArtifactRow.response_id),
            (AgentRoundRow, AgentRoundRow.response_id),
        ):
            await self.session.execute(delete(table).where(column.in_(gone)))
        return gone

    async def count_for_tenant(self, tenant_id: str) -> int:
        query = select(func.count()).select_from(Response).where(Response.tenant_id == tenant_id)
        return int((await self.session.execute(query)).scalar_one())


def _ancestors(*, stop_before_ancestor: bool = False) -> CTE:
    """A response and its ancestors with their distance from it (``hops``), as one
    recursive CTE, so walking a chain costs one query whatever its depth. Built once, with
    ``tenant_id`` and ``response_id`` as parameters; ``stop_before_ancestor`` ends the walk
    before the response ``ancestor_id`` (a parameter too)."""
    tenant: BindParameter[str] = bindparam("tenant_id")
    response: BindParameter[str] = bindparam("response_id")
    chain = (
        select(
            Response.id,
            Response.previous_response_id,
            Response.tenant_id,
            literal(0).label("hops"),
        )
        .where(Response.id == response, Response.tenant_id == tenant)
        .cte("chain", recursive=True)
    )
    # Each step stays in the first row's tenant by comparing with the chain's own column,
    # not the parameter: given a constant, PostgreSQL without statistics on the table yet
    # walked every step through the tenant index (all of the tenant's rows per step, 270 ms
    # at depth 1,000 against 10 ms by the primary key; docs/benchmarks/workers).
    step = and_(
        Response.id == chain.c.previous_response_id, Response.tenant_id == chain.c.tenant_id
    )
    if stop_before_ancestor:
        step = and_(step, Response.id != bindparam("ancestor_id"))
    parent = select(
        Response.id,
        Response.previous_response_id,
        Response.tenant_id,
        (chain.c.hops + 1).label("hops"),
    ).join(chain, step)
    return chain.union_all(parent)


_CHAIN = _ancestors()
_CHAIN_SINCE = _ancestors(stop_before_ancestor=True)
# Tenant scoping happens in the chain (both of its steps filter on tenant_id). Filtering
# the items on tenant_id as well would invite SQLite to scan all of the tenant's items
# through that index and probe the chain, instead of looking up the chain's few responses.
_CHAIN_ITEMS = (
    select(*_ITEM_COLUMNS)
    .select_from(_CHAIN)
    .join(ResponseItem, ResponseItem.response_id == _CHAIN.c.id)
    .order_by(_CHAIN.c.hops.desc(), ResponseItem.position)
)
_CHAIN_ITEMS_SINCE = (
    select(*_ITEM_COLUMNS, _CHAIN_SINCE.c.previous_response_id)
    .select_from(_CHAIN_SINCE)
    .outerjoin(ResponseItem, ResponseItem.response_id == _CHAIN_SINCE.c.id)
    .order_by(_CHAIN_SINCE.c.hops.desc(), ResponseItem.position)
)
_CHAIN_ROOT = (
    select(Response)
    .join(_CHAIN, _CHAIN.c.id == Response.id)
    .where(Response.tenant_id == bindparam("tenant_id"))
    .order_by(_CHAIN.c.hops.desc())
    .limit(1)
)
