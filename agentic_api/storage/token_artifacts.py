"""Queries over token artifacts (``token_artifacts``) and the reuse accounts kept on
responses. Tenant-scoped reads; nothing here commits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.turn_rows import artifact_values


class TokenArtifactRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def insert(self, row: TokenArtifactRow) -> None:
        connection = await self.session.connection()
        await connection.execute(insert(TokenArtifactRow), artifact_values(row))

    async def get(self, tenant_id: str, response_id: str) -> TokenArtifactRow | None:
        query = select(TokenArtifactRow).where(
            TokenArtifactRow.response_id == response_id, TokenArtifactRow.tenant_id == tenant_id
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def delete_for(self, response_ids: Sequence[str]) -> int:
        if not response_ids:
            return 0
        result = await self.session.execute(
            delete(TokenArtifactRow).where(TokenArtifactRow.response_id.in_(response_ids))
        )
        return int(cast(CursorResult[Any], result).rowcount)

    async def prune(self, older_than: datetime) -> int:
        """Deletes the ids of turns made before ``older_than`` (their accounts stay)."""
        result = await self.session.execute(
            delete(TokenArtifactRow).where(TokenArtifactRow.created_at < older_than)
        )
        return int(cast(CursorResult[Any], result).rowcount)

    async def account(self, tenant_id: str, response_id: str) -> tuple[bool, Any] | None:
        """(found, account) for a live response of the tenant; None when there is none."""
        query = select(Response.token_account).where(
            Response.id == response_id,
            Response.tenant_id == tenant_id,
            Response.deleted_at.is_(None),
        )
        row = (await self.session.execute(query)).first()
        return None if row is None else (True, row[0])

    async def set_account(self, response_id: str, account: dict[str, Any]) -> None:
        await self.session.execute(
            update(Response).where(Response.id == response_id).values(token_account=account)
        )
