"""Queries behind the admin inspection API: every tenant, not one (callers hold an admin key).

Reads select only the columns an admin view needs (never the stored bodies), walk
``previous_response_id`` chains with recursive CTEs (one query per walk, whatever the
depth) and aggregate usage in SQL. Lists fetch ``limit + 1`` rows so the caller can say
whether there is more without a second count query. Nothing here commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Select,
    and_,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import (
    AgentRoundRow,
    ApiKey,
    Conversation,
    ConversationItem,
    MessageTurn,
    Response,
    ResponseEvent,
    ResponseItem,
    Tenant,
    TokenArtifactRow,
)
from agentic_api.storage.tenants import IssuedKey, TenantRepository
from agentic_api.storage.types import utcnow

# Deletes go by id lists in chunks this long, well under every driver's parameter limit.
_DELETE_CHUNK = 500


class DuplicateTenantName(Exception):
    """Another tenant already has this name (tenant names are unique)."""


@dataclass(frozen=True)
class TurnRecord:
    """One stored response, as much of it as the timeline and lineage views need."""

    id: str
    tenant_id: str
    conversation_id: str | None
    previous_response_id: str | None
    session_id: str
    depth: int
    status: str
    model: str
    created_at: datetime
    deleted_at: datetime | None
    input_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    fingerprint: dict[str, Any]
    fingerprint_digest: str
    fingerprint_changes: list[dict[str, Any]]
    salt_epoch: int
    prefix_digest: str | None
    history_item_count: int
    input_item_count: int
    output_item_count: int
    conversation_position: int | None
    token_account: dict[str, Any] | None


# In TurnRecord's field order; selecting columns (not entities) skips body and request.
_TURN_COLUMNS = (
    Response.id,
    Response.tenant_id,
    Response.conversation_id,
    Response.previous_response_id,
    Response.session_id,
    Response.depth,
    Response.status,
    Response.model,
    Response.created_at,
    Response.deleted_at,
    Response.input_tokens,
    Response.cached_tokens,
    Response.output_tokens,
    Response.fingerprint,
    Response.fingerprint_digest,
    Response.fingerprint_changes,
    Response.salt_epoch,
    Response.prefix_digest,
    Response.history_item_count,
    Response.input_item_count,
    Response.output_item_count,
    Response.conversation_position,
    Response.token_account,
)


@dataclass(frozen=True)
class ConversationRecord:
    id: str
    tenant_id: str
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]
    head_response_id: str | None
    turn_count: int


@dataclass(frozen=True)
class ConversationFilter:
    updated_since: datetime | None = None
    # Conversations with at least one turn run on this model.
    model: str | None = None
    # Exact matches on metadata values, all of which must hold.
    metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class UsageTotals:
    model: str | None
    turns: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int


# Which API's turns the cache statistics count: Responses turns (stored responses),
# recorded Anthropic Messages turns, or both.
UsageApi = Literal["all", "responses", "messages"]


@dataclass(frozen=True)
class Window:
    """A half-open time window over ``created_at``: ``since <= t < until``."""

    since: datetime | None = None
    until: datetime | None = None


async def turns_page(
    session: AsyncSession,
    tenant_id: str,
    where: ColumnElement[bool],
    *,
    after: str | None,
    limit: int,
) -> list[TurnRecord]:
    """The tenant's turns that ``where`` selects, in start order (response ids are
    time-ordered), after the id ``after``: ``limit + 1`` rows, so the caller sees whether
    there are more."""
    query = select(*_TURN_COLUMNS).where(Response.tenant_id == tenant_id, where)
    if after is not None:
        query = query.where(Response.id > after)
    rows = (await session.execute(query.order_by(Response.id).limit(limit + 1))).all()
    return [TurnRecord(*row) for row in rows]


def _rowcount(result: Any) -> int:
    return int(cast(CursorResult[Any], result).rowcount)


class AdminRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.tenants = TenantRepository(session)

    # -- tenants and keys ---------------------------------------------------------------

    async def create_tenant(
        self, name: str, key_name: str | None
    ) -> tuple[Tenant, ApiKey, IssuedKey]:
        if await self.tenants.by_name(name) is not None:
            raise DuplicateTenantName(name)
        try:
            tenant = await self.tenants.create(name)
        except IntegrityError as exc:
            # A concurrent create won the unique name between our check and the insert.
            raise DuplicateTenantName(name) from exc
        key, issued = await self.issue_key(tenant, key_name)
        return tenant, key, issued

    async def issue_key(self, tenant: Tenant, name: str | None) -> tuple[ApiKey, IssuedKey]:
        """The new key's row and, once only, its plaintext."""
        issued = await self.tenants.issue_key(tenant, name)
        key = await self.session.get(ApiKey, issued.id)  # from the identity map, no query
        assert key is not None
        return key, issued

    async def list_tenants(self, *, after: str | None, limit: int) -> Sequence[Tenant]:
        # Ids are time-ordered, so id order is creation order.
        return await self.tenants.list(after=after, limit=limit + 1)

    async def set_disabled(self, tenant_id: str, disabled: bool) -> Tenant | None:
        statement = update(Tenant).where(Tenant.id == tenant_id)
        if disabled:
            # Disabling twice keeps the first time: it says since when the tenant is off.
            statement = statement.where(Tenant.disabled_at.is_(None)).values(disabled_at=utcnow())
        else:
            statement = statement.values(disabled_at=None)
        await self.session.execute(statement)
        return await self._fresh_tenant(tenant_id)

    async def rotate_salt(self, tenant_id: str) -> Tenant | None:
        # One UPDATE, not read-then-write: two concurrent rotations must give two epochs.
        await self.session.execute(
            update(Tenant).where(Tenant.id == tenant_id).values(salt_epoch=Tenant.salt_epoch + 1)
        )
        return await self._fresh_tenant(tenant_id)

    async def _fresh_tenant(self, tenant_id: str) -> Tenant | None:
        query = (
            select(Tenant).where(Tenant.id == tenant_id).execution_options(populate_existing=True)
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def list_keys(self, tenant_id: str, *, after: str | None, limit: int) -> Sequence[ApiKey]:
        query = select(ApiKey).where(ApiKey.tenant_id == tenant_id)
        if after is not None:
            query = query.where(ApiKey.id > after)
        query = query.order_by(ApiKey.id).limit(limit + 1)
        return (await self.session.execute(query)).scalars().all()

    async def revoke_key(self, tenant_id: str, key_id: str) -> ApiKey | None:
        """Revokes a key of this tenant (idempotently); None when it has no such key."""
        await self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.tenant_id == tenant_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        query = (
            select(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.tenant_id == tenant_id)
            .execution_options(populate_existing=True)
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    # -- conversations --------------------------------------------------------------------

    def _conversation_query(self, tenant_id: str) -> Select[*tuple[Any, ...]]:
        turn_count = (
            select(func.count())
            .where(Response.tenant_id == tenant_id, Response.conversation_id == Conversation.id)
            .correlate(Conversation)
            .scalar_subquery()
        )
        return select(
            Conversation.id,
            Conversation.tenant_id,
            Conversation.created_at,
            Conversation.updated_at,
            Conversation.metadata_,
            Conversation.head_response_id,
            turn_count,
        ).where(Conversation.tenant_id == tenant_id)

    async def get_conversation(
        self, tenant_id: str, conversation_id: str
    ) -> ConversationRecord | None:
        query = self._conversation_query(tenant_id).where(Conversation.id == conversation_id)
        row = (await self.session.execute(query)).first()
        return None if row is None else ConversationRecord(*row)

    async def list_conversations(
        self,
        tenant_id: str,
        filters: ConversationFilter,
        *,
        after: ConversationRecord | None,
        limit: int,
    ) -> Sequence[ConversationRecord]:
        """Newest first by ``updated_at`` then id; ``after`` is the last row of the previous
        page (keyset pagination: stable while rows are added, no OFFSET scans)."""
        query = self._conversation_query(tenant_id)
        if filters.updated_since is not None:
            query = query.where(Conversation.updated_at >= filters.updated_since)
        if filters.model is not None:
            query = query.where(
                exists().where(
                    Response.tenant_id == tenant_id,
                    Response.conversation_id == Conversation.id,
                    Response.model == filters.model,
                )
            )
        for key, value in filters.metadata:
            query = query.where(self._metadata_equals(key, value))
        if after is not None:
            query = query.where(
                or_(
                    Conversation.updated_at < after.updated_at,
                    and_(Conversation.updated_at == after.updated_at, Conversation.id < after.id),
                )
            )
        query = query.order_by(Conversation.updated_at.desc(), Conversation.id.desc())
        rows = (await self.session.execute(query.limit(limit + 1))).all()
        return [ConversationRecord(*row) for row in rows]

    def _metadata_equals(self, key: str, value: str) -> ColumnElement[bool]:
        """``metadata[key] == value`` evaluated by the database, with key and value bound.

        PostgreSQL: ``metadata ->> :key`` (JSONB). SQLite: a JSON path would need the key
        spliced into ``$."key"``, which breaks on keys holding quotes, so the key is looked
        up through ``json_each`` instead. Only string values match: metadata values are
        strings, and ``"1"`` must not equal the number 1.
        """
        if self.session.get_bind().dialect.name == "postgresql":
            document = Conversation.metadata_
            return and_(
                func.jsonb_typeof(document[key]) == "string",
                document[key].as_string() == value,
            )
        pairs = func.json_each(Conversation.metadata_).table_valued("key", "value", "type")
        return (
            select(literal(1))
            .select_from(pairs)
            .where(pairs.c.key == key, pairs.c.type == "text", pairs.c.value == value)
            .exists()
        )

    async def conversation_turns(
        self, tenant_id: str, conversation_id: str, *, after: str | None, limit: int
    ) -> Sequence[TurnRecord]:
        return await turns_page(
            self.session,
            tenant_id,
            Response.conversation_id == conversation_id,
            after=after,
            limit=limit,
        )

    async def turn_before(
        self, tenant_id: str, conversation_id: str, before: str
    ) -> TurnRecord | None:
        """The latest turn of the conversation before ``before`` that left a history
        (a continuable one: failed turns record none), to compare a page's first turn to."""
        query = (
            select(*_TURN_COLUMNS)
            .where(
                Response.tenant_id == tenant_id,
                Response.conversation_id == conversation_id,
                Response.id < before,
                Response.prefix_digest.is_not(None),
            )
            .order_by(Response.id.desc())
            .limit(1)
        )
        row = (await self.session.execute(query)).first()
        return None if row is None else TurnRecord(*row)

    # -- previous_response_id lineage ------------------------------------------------------

    async def ancestors(self, response_id: str) -> Sequence[TurnRecord]:
        """The response and its ancestors, root first, in one recursive query. Deleted
        responses are included (they are still part of their descendants' history)."""
        chain = (
            select(
                Response.id,
                Response.tenant_id,
                Response.previous_response_id,
                literal(0).label("hops"),
            )
            .where(Response.id == response_id)
            .cte("ancestors", recursive=True)
        )
        parent = select(
            Response.id,
            Response.tenant_id,
            Response.previous_response_id,
            (chain.c.hops + 1).label("hops"),
        ).join(
            chain,
            and_(
                Response.id == chain.c.previous_response_id,
                Response.tenant_id == chain.c.tenant_id,
            ),
        )
        chain = chain.union_all(parent)
        query = (
            select(*_TURN_COLUMNS)
            .join(chain, chain.c.id == Response.id)
            .order_by(chain.c.hops.desc())
        )
        return [TurnRecord(*row) for row in (await self.session.execute(query)).all()]

    async def descendants(self, response_id: str, *, limit: int) -> Sequence[TurnRecord]:
        """Everything continued from the response (forks included), breadth first, in one
        recursive query; at most ``limit + 1`` rows so the caller can tell it was cut."""
        tree = (
            select(Response.id, Response.tenant_id, literal(0).label("hops"))
            .where(Response.id == response_id)
            .cte("descendants", recursive=True)
        )
        child = select(Response.id, Response.tenant_id, (tree.c.hops + 1).label("hops")).join(
            tree,
            and_(
                Response.previous_response_id == tree.c.id,
                # Compared as an expression, not the bare column: SQLite's planner (no
                # statistics) otherwise walks each step through the (tenant_id,
                # created_at) index, every row of the tenant per level (1.5 s for a
                # 100-turn chain among 4,000 rows), instead of previous_response_id's.
                Response.tenant_id.concat("") == tree.c.tenant_id,
            ),
        )
        tree = tree.union_all(child)
        query = (
            select(*_TURN_COLUMNS)
            .join(tree, tree.c.id == Response.id)
            .where(tree.c.hops > 0)
            .order_by(tree.c.hops, Response.id)
            .limit(limit + 1)
        )
        return [TurnRecord(*row) for row in (await self.session.execute(query)).all()]

    async def token_artifact(self, response_id: str) -> TokenArtifactRow | None:
        query = select(TokenArtifactRow).where(TokenArtifactRow.response_id == response_id)
        return (await self.session.execute(query)).scalar_one_or_none()

    # -- cache statistics -----------------------------------------------------------------

    def _usage_rows(self, tenant_id: str, window: Window, api: UsageApi) -> Any:
        """The tenant's turns in the window as (model, input, cached, output) rows: stored
        responses and recorded Messages turns, as ``api`` says."""
        parts: list[Select[*tuple[Any, ...]]] = []
        for name, table in (("responses", Response), ("messages", MessageTurn)):
            if api not in ("all", name):
                continue
            part = select(
                table.model.label("model"),
                table.input_tokens.label("input_tokens"),
                table.cached_tokens.label("cached_tokens"),
                table.output_tokens.label("output_tokens"),
            ).where(table.tenant_id == tenant_id)
            if window.since is not None:
                part = part.where(table.created_at >= window.since)
            if window.until is not None:
                part = part.where(table.created_at < window.until)
            parts.append(part)
        query = parts[0] if len(parts) == 1 else parts[0].union_all(*parts[1:])
        return query.subquery("usage")

    def _usage_query(self, rows: Any) -> Select[*tuple[Any, ...]]:
        return select(
            func.count(),
            func.coalesce(func.sum(rows.c.input_tokens), 0),
            func.coalesce(func.sum(rows.c.cached_tokens), 0),
            func.coalesce(func.sum(rows.c.output_tokens), 0),
        )

    async def usage_by_model(
        self,
        tenant_id: str,
        window: Window,
        *,
        after: str | None,
        limit: int,
        api: UsageApi = "all",
    ) -> Sequence[UsageTotals]:
        """Per-model totals over every stored turn, deleted ones included: deleting a
        response hides it from the tenant but the upstream work it records happened."""
        rows = self._usage_rows(tenant_id, window, api)
        query = self._usage_query(rows).add_columns(rows.c.model)
        if after is not None:
            query = query.where(rows.c.model > after)
        query = query.group_by(rows.c.model).order_by(rows.c.model).limit(limit + 1)
        found = (await self.session.execute(query)).all()
        return [UsageTotals(row[4], int(row[0]), *(int(v) for v in row[1:4])) for row in found]

    async def usage_total(
        self, tenant_id: str, window: Window, api: UsageApi = "all"
    ) -> UsageTotals:
        query = self._usage_query(self._usage_rows(tenant_id, window, api))
        row = (await self.session.execute(query)).one()
        return UsageTotals(None, *(int(v) for v in row))

    # -- destructive actions -----------------------------------------------------------------

    async def delete_conversation(
        self, tenant_id: str, conversation_id: str
    ) -> dict[str, int] | None:
        """Deletes the conversation, its items, its turns, the subagents its multi-agent
        turns stored, and every response continued from any of those by
        ``previous_response_id`` (their history holds the conversation's content, and
        without their ancestors they could no longer be rehydrated anyway).
        Returns rows deleted per table, or None when the tenant has no such conversation."""
        owned = select(Conversation.id).where(
            Conversation.id == conversation_id, Conversation.tenant_id == tenant_id
        )
        if (await self.session.execute(owned)).first() is None:
            return None
        counts = await self._delete_responses(
            await self._conversation_response_ids(tenant_id, conversation_id)
        )
        result = await self.session.execute(
            delete(ConversationItem).where(
                ConversationItem.conversation_id == conversation_id,
                ConversationItem.tenant_id == tenant_id,
            )
        )
        counts["conversation_items"] = _rowcount(result)
        result = await self.session.execute(
            delete(Conversation).where(
                Conversation.id == conversation_id, Conversation.tenant_id == tenant_id
            )
        )
        counts["conversations"] = _rowcount(result)
        return counts

    async def _conversation_response_ids(self, tenant_id: str, conversation_id: str) -> list[str]:
        tree = (
            select(Response.id)
            .where(Response.tenant_id == tenant_id, Response.conversation_id == conversation_id)
            .cte("doomed", recursive=True)
        )
        # A turn's continuations and the subagents its tree stored (and theirs, in turn).
        child = select(Response.id).join(
            tree,
            and_(
                or_(Response.previous_response_id == tree.c.id, Response.spawned_by == tree.c.id),
                Response.tenant_id == tenant_id,
            ),
        )
        # UNION (not ALL) so a response reached twice is listed once.
        tree = tree.union(child)
        return list((await self.session.execute(select(tree.c.id))).scalars().all())

    async def _delete_responses(self, response_ids: Sequence[str]) -> dict[str, int]:
        counts = {
            "response_events": 0,
            "response_items": 0,
            "token_artifacts": 0,
            "agent_rounds": 0,
            "responses": 0,
        }
        for start in range(0, len(response_ids), _DELETE_CHUNK):
            chunk = response_ids[start : start + _DELETE_CHUNK]
            for table, column in (
                (ResponseEvent, ResponseEvent.response_id),
                (AgentRoundRow, AgentRoundRow.response_id),
                (TokenArtifactRow, TokenArtifactRow.response_id),
                (ResponseItem, ResponseItem.response_id),
                (Response, Response.id),
            ):
                result = await self.session.execute(delete(table).where(column.in_(chunk)))
                counts[table.__tablename__] += _rowcount(result)
        return counts

    async def purge_tenant_data(self, tenant_id: str) -> dict[str, int]:
        """Deletes every response, item, stored event, conversation and recorded Messages
        turn of the tenant; the tenant and its keys stay. Children first, so no step
        relies on cascades."""
        counts: dict[str, int] = {}
        tenant_responses = select(Response.id).where(Response.tenant_id == tenant_id)
        steps: list[tuple[str, Any]] = [
            (
                "response_events",
                delete(ResponseEvent).where(ResponseEvent.response_id.in_(tenant_responses)),
            ),
            ("response_items", delete(ResponseItem).where(ResponseItem.tenant_id == tenant_id)),
            (
                "token_artifacts",
                delete(TokenArtifactRow).where(TokenArtifactRow.tenant_id == tenant_id),
            ),
            ("agent_rounds", delete(AgentRoundRow).where(AgentRoundRow.tenant_id == tenant_id)),
            ("responses", delete(Response).where(Response.tenant_id == tenant_id)),
            (
                "conversation_items",
                delete(ConversationItem).where(ConversationItem.tenant_id == tenant_id),
            ),
            ("conversations", delete(Conversation).where(Conversation.tenant_id == tenant_id)),
            ("message_turns", delete(MessageTurn).where(MessageTurn.tenant_id == tenant_id)),
        ]
        for name, statement in steps:
            counts[name] = _rowcount(await self.session.execute(statement))
        return counts
