"""Whose sessions to show residency for: a tenant's most recently active ones (the
residency itself is this process's tracker's, read by ``operator/handlers/admin/residency``)."""

from __future__ import annotations

from dataclasses import dataclass

from agentic_api.operator.handlers.admin.views import tenant_view
from agentic_api.operator.queries.console import ConsoleRepository, SessionFilter
from agentic_api.operator.shapes.admin import AdminTenant
from agentic_api.runtime import Runtime
from agentic_api.storage.session_owners import SessionOwner


@dataclass(frozen=True)
class RecentSessions:
    tenant: AdminTenant
    owners: list[SessionOwner]


async def recent_sessions(
    services: Runtime, tenant_id: str, *, limit: int
) -> RecentSessions | None:
    async with services.db.read() as session:
        repo = ConsoleRepository(session)
        tenant = await repo.tenant(tenant_id)
        if tenant is None:
            return None
        page = await repo.sessions(
            tenant_id,
            SessionFilter(),
            sort="last_activity",
            descending=True,
            offset=0,
            limit=limit,
        )
    owners = [
        SessionOwner(
            session_id=row.session_id,
            tenant_id=tenant.id,
            salt_epoch=tenant.salt_epoch,
            conversation_id=row.conversation_id,
            response_id=row.last_response_id,
            # The page shows each replica's session tally; a branch's own prefix is on
            # the admin residency routes (it needs the response's token ids).
            branch_response_id=None,
        )
        for row in page.rows
    ]
    return RecentSessions(tenant_view(tenant), owners)
