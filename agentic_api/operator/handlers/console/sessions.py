"""A tenant's sessions (conversations and ``previous_response_id`` chains), filtered,
sorted and paged by the database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentic_api.operator.handlers.admin.views import tenant_view
from agentic_api.operator.queries.console import (
    ConsoleRepository,
    SessionFilter,
    SessionSort,
    SessionSummary,
)
from agentic_api.operator.shapes.admin import AdminTenant, hit_ratio
from agentic_api.runtime import Runtime

# What a page passes in: the repository's own filter and sort keys.
__all__ = ["SessionFilter", "SessionList", "SessionRow", "SessionSort", "list_sessions"]


@dataclass(frozen=True)
class SessionRow:
    summary: SessionSummary
    hit_ratio: float | None
    # The conversation's metadata, for a conversation's session.
    metadata: dict[str, Any] | None


@dataclass(frozen=True)
class SessionList:
    tenant: AdminTenant
    rows: list[SessionRow]
    total: int


async def list_sessions(
    services: Runtime,
    tenant_id: str,
    filters: SessionFilter,
    *,
    sort: SessionSort,
    descending: bool,
    offset: int,
    limit: int,
) -> SessionList | None:
    """Three statements whatever the page holds: the tenant, the sessions, the
    metadata of the conversations among them."""
    async with services.db.read() as session:
        repo = ConsoleRepository(session)
        tenant = await repo.tenant(tenant_id)
        if tenant is None:
            return None
        page = await repo.sessions(
            tenant_id, filters, sort=sort, descending=descending, offset=offset, limit=limit
        )
        metadata = await repo.conversation_metadata(
            tenant_id, [row.conversation_id for row in page.rows if row.conversation_id]
        )
    rows = [
        SessionRow(
            summary=row,
            hit_ratio=hit_ratio(row.input_tokens, row.cached_tokens),
            metadata=metadata.get(row.conversation_id) if row.conversation_id else None,
        )
        for row in page.rows
    ]
    return SessionList(tenant_view(tenant), rows, page.total)
