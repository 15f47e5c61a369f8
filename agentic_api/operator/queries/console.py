"""Queries behind the operator console (``/console``): every tenant, not one (callers hold
an admin key), aggregated in SQL so a page costs a fixed number of statements however
many rows it summarizes.

What the admin API already reads (a conversation's turns, a chain, a token artifact) is
read through ``operator/queries/admin.py``; this module adds what only the console shows: usage per
tenant, per session and per time bucket, lost tokens summed from each turn's account
(``responses.lost_tokens`` and ``lost_by_cause``, written with the turn), latencies, items and the
background queue, and the logouts of console sessions. Nothing here commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Select,
    case,
    cast,
    delete,
    func,
    literal,
    literal_column,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.operator.queries.admin import _TURN_COLUMNS, TurnRecord, turns_page
from agentic_api.storage.jobs import QUEUED, RUNNING
from agentic_api.storage.models import (
    AdminKey,
    BackgroundJob,
    ConsoleLogout,
    Conversation,
    MessageTurn,
    Response,
    ResponseItem,
    Tenant,
)
from agentic_api.storage.tenants import hash_key

SessionSort = Literal["last_activity", "turns", "hit_ratio", "lost_tokens"]
JobState = Literal["queued", "running", "failed"]


@dataclass(frozen=True)
class TenantUsage:
    """A tenant's turns (Responses and recorded Messages) and, from the token accounts of
    its Responses turns, the tokens the cache lost."""

    tenant_id: str
    turns: int
    input_tokens: int
    cached_tokens: int
    lost_tokens: int


@dataclass(frozen=True)
class UsageBucket:
    start: int  # unix seconds
    turns: int
    input_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class LostBucket:
    start: int
    cause: str
    tokens: int


@dataclass(frozen=True)
class SessionFilter:
    # A substring of the session id.
    contains: str | None = None
    # Sessions with at least one turn on this model.
    model: str | None = None
    min_turns: int = 1
    # Only sessions whose token accounts record lost tokens.
    lossy: bool = False


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    turns: int
    first_at: datetime
    last_at: datetime
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    lost_tokens: int
    # Set when the session is (or continues) a conversation.
    conversation_id: str | None
    last_response_id: str


@dataclass(frozen=True)
class SessionPage:
    rows: list[SessionSummary]
    total: int


@dataclass(frozen=True)
class ItemRecord:
    position: int
    item_id: str
    role: str
    type: str
    data: str


@dataclass(frozen=True)
class JobRecord:
    response_id: str
    tenant_id: str
    tenant_name: str
    model: str
    status: str
    enqueued_at: datetime | None
    started_at: datetime | None
    attempts: int | None
    error: dict[str, Any] | None


def _lost_per_turn() -> ColumnElement[int | None]:
    """One turn's lost tokens (NULL without an account)."""
    return Response.lost_tokens.expression


def _lost_of(dialect: str, cause: str) -> ColumnElement[int]:
    """One turn's tokens lost to ``cause`` (NULL when none were)."""
    tokens: ColumnElement[Any]
    if dialect == "postgresql":
        tokens = Response.lost_by_cause.op("->>")(literal(cause))
    else:
        tokens = func.json_extract(Response.lost_by_cause, literal(f"$.{cause}"))
    return cast(tokens, BigInteger)


def _bucket(dialect: str, column: str, seconds: int) -> ColumnElement[int]:
    """The start (unix seconds) of the ``seconds``-long bucket holding ``column``."""
    if dialect == "postgresql":
        sql = f"CAST(FLOOR(EXTRACT(EPOCH FROM {column}) / {seconds:d}) AS BIGINT) * {seconds:d}"
    else:
        sql = f"(CAST(strftime('%s', {column}) AS INTEGER) / {seconds:d}) * {seconds:d}"
    return literal_column(sql, BigInteger)


def _sum(column: Any) -> ColumnElement[int]:
    return func.coalesce(func.sum(column), 0)


class ConsoleRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.dialect = session.get_bind().dialect.name

    # -- who may open it ----------------------------------------------------------------

    async def any_admin_key(self) -> bool:
        query = select(AdminKey.id).where(AdminKey.revoked_at.is_(None)).limit(1)
        return (await self.session.execute(query)).first() is not None

    async def admin_key_id(self, plaintext: str) -> str | None:
        """The id of the active admin key with this plaintext (tenant keys are not in the
        table, so they never match)."""
        query = select(AdminKey.id).where(
            AdminKey.key_hash == hash_key(plaintext), AdminKey.revoked_at.is_(None)
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def login_active(self, key_id: str, nonce: str) -> bool:
        """Whether a console login still counts: its admin key is active and the session
        (its nonce) has not logged out. One statement, as each page asks it."""
        ended = select(ConsoleLogout.nonce).where(ConsoleLogout.nonce == nonce).exists()
        query = select(AdminKey.id).where(
            AdminKey.id == key_id, AdminKey.revoked_at.is_(None), ~ended
        )
        return (await self.session.execute(query)).first() is not None

    async def end_login(self, nonce: str, *, expires_at: datetime, now: datetime) -> None:
        """Record a logout until the cookie would have expired, and drop the records of
        cookies that have expired since (they are refused on their expiry already)."""
        await self.session.execute(delete(ConsoleLogout).where(ConsoleLogout.expires_at <= now))
        if await self.session.get(ConsoleLogout, nonce) is None:
            self.session.add(ConsoleLogout(nonce=nonce, expires_at=expires_at))

    # -- tenants ------------------------------------------------------------------------

    async def tenants(self, *, offset: int, limit: int) -> tuple[Sequence[Tenant], int]:
        """A page of tenants, oldest first, and how many there are."""
        total = func.count().over().label("total")
        query = select(Tenant, total).order_by(Tenant.id).offset(offset).limit(limit)
        rows = (await self.session.execute(query)).all()
        return [row[0] for row in rows], int(rows[0][1]) if rows else 0

    async def tenant(self, tenant_id: str) -> Tenant | None:
        return await self.session.get(Tenant, tenant_id)

    async def tenant_usage(self, tenant_ids: Sequence[str]) -> dict[str, TenantUsage]:
        """Usage of each tenant, every tenant in one statement (the admin cache_stats
        total with ``api=all``, plus lost tokens)."""
        if not tenant_ids:
            return {}
        responses = select(
            Response.tenant_id.label("tenant_id"),
            Response.input_tokens.label("input_tokens"),
            Response.cached_tokens.label("cached_tokens"),
            _lost_per_turn().label("lost"),
        ).where(Response.tenant_id.in_(tenant_ids))
        messages = select(
            MessageTurn.tenant_id,
            MessageTurn.input_tokens,
            MessageTurn.cached_tokens,
            cast(None, BigInteger),
        ).where(MessageTurn.tenant_id.in_(tenant_ids))
        usage = union_all(responses, messages).subquery("usage")
        query = select(
            usage.c.tenant_id,
            func.count(),
            _sum(usage.c.input_tokens),
            _sum(usage.c.cached_tokens),
            _sum(usage.c.lost),
        ).group_by(usage.c.tenant_id)
        rows = (await self.session.execute(query)).all()
        return {row[0]: TenantUsage(row[0], *(int(v) for v in row[1:])) for row in rows}

    async def usage_series(
        self, tenant_id: str, since: datetime, bucket_seconds: int
    ) -> list[UsageBucket]:
        """Turns and tokens per time bucket from ``since`` on, both APIs."""
        parts = [
            select(
                _bucket(self.dialect, f"{table.__tablename__}.created_at", bucket_seconds).label(
                    "start"
                ),
                table.input_tokens.label("input_tokens"),
                table.cached_tokens.label("cached_tokens"),
            ).where(table.tenant_id == tenant_id, table.created_at >= since)
            for table in (Response, MessageTurn)
        ]
        usage = union_all(*parts).subquery("usage")
        query = (
            select(
                usage.c.start,
                func.count(),
                _sum(usage.c.input_tokens),
                _sum(usage.c.cached_tokens),
            )
            .group_by(usage.c.start)
            .order_by(usage.c.start)
        )
        rows = (await self.session.execute(query)).all()
        return [UsageBucket(*(int(v) for v in row)) for row in rows]

    async def lost_series(
        self, tenant_id: str, since: datetime, bucket_seconds: int, causes: Sequence[str]
    ) -> list[LostBucket]:
        """Lost tokens per time bucket and cause, from each turn's ``lost_by_cause``.

        One column per cause (the caller names them: the causes are the cache layer's) in
        one pass over the tenant's rows; expanding each turn's document into rows
        (``jsonb_each``) cost several times more on a tenant of 20,000 turns."""
        if not causes:
            return []
        per_cause = [_sum(_lost_of(self.dialect, cause)) for cause in causes]
        start = _bucket(self.dialect, "responses.created_at", bucket_seconds).label("start")
        query = (
            select(start, *per_cause)
            .where(
                Response.tenant_id == tenant_id,
                Response.created_at >= since,
                Response.lost_tokens > 0,
            )
            .group_by(start)
            .order_by(start)
        )
        rows = (await self.session.execute(query)).all()
        return [
            LostBucket(int(row[0]), cause, int(tokens))
            for row in rows
            for cause, tokens in zip(causes, row[1:], strict=True)
            if tokens
        ]

    # -- sessions -------------------------------------------------------------------------

    async def sessions(
        self,
        tenant_id: str,
        filters: SessionFilter,
        *,
        sort: SessionSort,
        descending: bool,
        offset: int,
        limit: int,
    ) -> SessionPage:
        """The tenant's sessions (a conversation, or a ``previous_response_id`` chain's
        session), one row each with its aggregates, sorted and paged in one statement.

        Lost tokens are summed from each turn's ``lost_tokens`` column, as cheap as the
        other sums."""
        turns = func.count()
        input_tokens = _sum(Response.input_tokens)
        cached_tokens = _sum(Response.cached_tokens)
        lost = _sum(_lost_per_turn())
        keys: dict[SessionSort, ColumnElement[Any]] = {
            "last_activity": func.max(Response.created_at),
            "turns": turns,
            "hit_ratio": cast(cached_tokens, Float) / func.nullif(input_tokens, 0),
            "lost_tokens": lost,
        }
        columns: list[ColumnElement[Any]] = [
            Response.session_id.label("session_id"),
            turns.label("turns"),
            func.min(Response.created_at).label("first_at"),
            func.max(Response.created_at).label("last_at"),
            input_tokens.label("input_tokens"),
            cached_tokens.label("cached_tokens"),
            _sum(Response.output_tokens).label("output_tokens"),
            func.max(Response.conversation_id).label("conversation_id"),
            func.max(Response.id).label("last_response_id"),
            func.count().over().label("total"),
            keys[sort].label("sort_key"),
            lost.label("lost"),
        ]
        query = (
            select(*columns).where(Response.tenant_id == tenant_id).group_by(Response.session_id)
        )
        if filters.contains:
            pattern = "%" + _escape_like(filters.contains) + "%"
            query = query.where(Response.session_id.like(pattern, escape="\\"))
        if filters.model is not None:
            on_model = case((Response.model == filters.model, 1), else_=0)
            query = query.having(func.sum(on_model) > 0)
        if filters.min_turns > 1:
            query = query.having(turns >= filters.min_turns)
        if filters.lossy:
            query = query.having(lost > 0)
        key = keys[sort]
        ordered = key.desc() if descending else key.asc()
        tie = Response.session_id.desc() if descending else Response.session_id.asc()
        page = query.order_by(ordered.nulls_last(), tie).offset(offset).limit(limit).subquery()
        rows_query = select(page)
        outer_key = page.c.sort_key.desc() if descending else page.c.sort_key.asc()
        outer_tie = page.c.session_id.desc() if descending else page.c.session_id.asc()
        rows = (
            (await self.session.execute(rows_query.order_by(outer_key.nulls_last(), outer_tie)))
            .mappings()
            .all()
        )
        summaries = [
            SessionSummary(
                session_id=row["session_id"],
                turns=int(row["turns"]),
                first_at=row["first_at"],
                last_at=row["last_at"],
                input_tokens=int(row["input_tokens"]),
                cached_tokens=int(row["cached_tokens"]),
                output_tokens=int(row["output_tokens"]),
                lost_tokens=int(row["lost"]),
                conversation_id=row["conversation_id"],
                last_response_id=row["last_response_id"],
            )
            for row in rows
        ]
        return SessionPage(summaries, int(rows[0]["total"]) if rows else 0)

    async def conversation_metadata(
        self, tenant_id: str, conversation_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        if not conversation_ids:
            return {}
        query = select(Conversation.id, Conversation.metadata_).where(
            Conversation.tenant_id == tenant_id, Conversation.id.in_(conversation_ids)
        )
        return {row[0]: row[1] or {} for row in (await self.session.execute(query)).all()}

    async def session_turns(
        self, tenant_id: str, session_id: str, *, after: str | None, limit: int
    ) -> Sequence[TurnRecord]:
        """A session's turns in start order; ``limit + 1`` rows."""
        return await turns_page(
            self.session, tenant_id, Response.session_id == session_id, after=after, limit=limit
        )

    async def turns_by_id(self, tenant_id: str, ids: Sequence[str]) -> dict[str, TurnRecord]:
        if not ids:
            return {}
        query = select(*_TURN_COLUMNS).where(Response.tenant_id == tenant_id, Response.id.in_(ids))
        return {row[0]: TurnRecord(*row) for row in (await self.session.execute(query)).all()}

    async def latencies(self, ids: Sequence[str]) -> dict[str, float]:
        """Seconds from each response's creation to its completion (finished turns only)."""
        if not ids:
            return {}
        query = select(Response.id, Response.created_at, Response.completed_at).where(
            Response.id.in_(ids), Response.completed_at.is_not(None)
        )
        rows = (await self.session.execute(query)).all()
        return {row[0]: (row[2] - row[1]).total_seconds() for row in rows if row[2] is not None}

    # -- one response ---------------------------------------------------------------------

    async def turn(self, response_id: str) -> TurnRecord | None:
        """One response of any tenant (deleted ones too: they are part of a history)."""
        query = select(*_TURN_COLUMNS).where(Response.id == response_id)
        row = (await self.session.execute(query)).first()
        return None if row is None else TurnRecord(*row)

    async def items(
        self, response_id: str, *, after_position: int | None, limit: int
    ) -> Sequence[ItemRecord]:
        """The response's stored input and output items in order; ``limit + 1`` rows."""
        query = select(
            ResponseItem.position,
            ResponseItem.item_id,
            ResponseItem.role,
            ResponseItem.type,
            ResponseItem.data,
        ).where(ResponseItem.response_id == response_id)
        if after_position is not None:
            query = query.where(ResponseItem.position > after_position)
        query = query.order_by(ResponseItem.position).limit(limit + 1)
        return [ItemRecord(*row) for row in (await self.session.execute(query)).all()]

    # -- background jobs --------------------------------------------------------------------

    async def jobs(self, state: JobState, *, offset: int, limit: int) -> Sequence[JobRecord]:
        """Queued or running jobs (oldest first), or failed background responses (newest
        first: a failed job's row is gone, its response says how it ended)."""
        query: Select[Any]
        if state in (QUEUED, RUNNING):
            query = (
                select(
                    BackgroundJob.response_id,
                    BackgroundJob.tenant_id,
                    Tenant.name,
                    Response.model,
                    BackgroundJob.status,
                    BackgroundJob.enqueued_at,
                    BackgroundJob.started_at,
                    BackgroundJob.attempts,
                    Response.error,
                )
                .join(Response, Response.id == BackgroundJob.response_id)
                .join(Tenant, Tenant.id == BackgroundJob.tenant_id)
                .where(BackgroundJob.status == state)
                .order_by(BackgroundJob.enqueued_at, BackgroundJob.response_id)
            )
        else:
            query = (
                select(
                    Response.id,
                    Response.tenant_id,
                    Tenant.name,
                    Response.model,
                    Response.status,
                    Response.created_at,
                    Response.completed_at,
                    cast(None, BigInteger),
                    Response.error,
                )
                .join(Tenant, Tenant.id == Response.tenant_id)
                .where(Response.background.is_(True), Response.status == "failed")
                .order_by(Response.id.desc())
            )
        rows = (await self.session.execute(query.offset(offset).limit(limit + 1))).all()
        return [JobRecord(*row) for row in rows]


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
