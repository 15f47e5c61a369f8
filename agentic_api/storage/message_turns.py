"""Recorded Anthropic Messages API turns (only with AGENTIC_MESSAGES_RECORD_TURNS): one
row per turn, tenant-scoped, holding usage and session coordinates and no content."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import MessageTurn
from agentic_api.storage.types import utcnow
from lineage import IdKind, mint_id


@dataclass(frozen=True)
class MessageTurnRecord:
    tenant_id: str
    session_id: str
    session_source: str
    model: str
    stream: bool
    status: str
    stop_reason: str | None
    message_id: str | None
    message_count: int
    input_tokens: int | None
    cached_tokens: int | None
    cache_creation_tokens: int | None
    output_tokens: int | None


class MessageTurnRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, record: MessageTurnRecord) -> str:
        row = MessageTurn(
            id=mint_id(IdKind.MESSAGE_TURN),
            tenant_id=record.tenant_id,
            session_id=record.session_id,
            session_source=record.session_source,
            model=record.model,
            stream=record.stream,
            status=record.status,
            stop_reason=record.stop_reason,
            message_id=record.message_id,
            created_at=utcnow(),
            message_count=record.message_count,
            input_tokens=record.input_tokens,
            cached_tokens=record.cached_tokens,
            cache_creation_tokens=record.cache_creation_tokens,
            output_tokens=record.output_tokens,
        )
        self.session.add(row)
        return row.id

    async def list(
        self, tenant_id: str, *, session_id: str | None, after: str | None, limit: int
    ) -> Sequence[MessageTurn]:
        """Oldest first (ids are time-ordered); ``limit + 1`` rows so the caller can say
        whether there is more."""
        query = select(MessageTurn).where(MessageTurn.tenant_id == tenant_id)
        if session_id is not None:
            query = query.where(MessageTurn.session_id == session_id)
        if after is not None:
            query = query.where(MessageTurn.id > after)
        query = query.order_by(MessageTurn.id).limit(limit + 1)
        return (await self.session.execute(query)).scalars().all()
