"""Background jobs (queued, running, failed) and recorded Anthropic Messages turns."""

from __future__ import annotations

from dataclasses import dataclass

from agentic_api.operator.handlers.admin.views import tenant_view
from agentic_api.operator.queries.console import ConsoleRepository, JobRecord, JobState
from agentic_api.operator.shapes.admin import AdminTenant
from agentic_api.runtime import Runtime
from agentic_api.storage.message_turns import MessageTurnRepository
from agentic_api.storage.models import MessageTurn

__all__ = ["JobList", "JobState", "MessageTurnList", "list_jobs", "list_message_turns"]


@dataclass(frozen=True)
class JobList:
    state: JobState
    rows: list[JobRecord]
    has_more: bool


async def list_jobs(services: Runtime, state: JobState, *, offset: int, limit: int) -> JobList:
    async with services.db.read() as session:
        rows = list(await ConsoleRepository(session).jobs(state, offset=offset, limit=limit))
    return JobList(state, rows[:limit], len(rows) > limit)


@dataclass(frozen=True)
class MessageTurnList:
    tenant: AdminTenant
    rows: list[MessageTurn]
    has_more: bool


async def list_message_turns(
    services: Runtime, tenant_id: str, *, after: str | None, limit: int
) -> MessageTurnList | None:
    """Oldest first, as the admin list answers."""
    async with services.db.read() as session:
        tenant = await ConsoleRepository(session).tenant(tenant_id)
        if tenant is None:
            return None
        rows = list(
            await MessageTurnRepository(session).list(
                tenant_id, session_id=None, after=after, limit=limit
            )
        )
    return MessageTurnList(tenant_view(tenant), rows[:limit], len(rows) > limit)
