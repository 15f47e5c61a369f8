"""A tenant's usage: cache statistics per model over a window, and its recorded
Anthropic Messages turns."""

from __future__ import annotations

from agentic_api.operator.handlers.admin.conversations import at
from agentic_api.operator.handlers.admin.tenants import require_tenant
from agentic_api.operator.handlers.admin.views import list_page, message_turn_view, stats_view
from agentic_api.operator.queries.admin import AdminRepository, Window
from agentic_api.operator.shapes.admin import AdminMessageTurn, CacheStatsPage, ListPage, UsageApi
from agentic_api.runtime import Runtime
from agentic_api.serving.pagination import page_of
from agentic_api.storage.message_turns import MessageTurnRepository


async def cache_stats(
    services: Runtime,
    tenant_id: str,
    *,
    since: int | None,
    until: int | None,
    after: str | None,
    limit: int,
    api: UsageApi,
) -> CacheStatsPage:
    window = Window(at(since), at(until))
    async with services.db.read() as session:
        repo = AdminRepository(session)
        await require_tenant(repo, tenant_id)
        rows, more = page_of(
            await repo.usage_by_model(tenant_id, window, after=after, limit=limit, api=api),
            limit,
        )
        total = await repo.usage_total(tenant_id, window, api)
    data = [stats_view(r) for r in rows]
    return CacheStatsPage(
        data=data,
        first_id=data[0].model if data else None,
        last_id=data[-1].model if data else None,
        has_more=more,
        tenant_id=tenant_id,
        since=since,
        until=until,
        api=api,
        total=stats_view(total),
    )


async def list_message_turns(
    services: Runtime, tenant_id: str, session_id: str | None, after: str | None, limit: int
) -> ListPage[AdminMessageTurn]:
    async with services.db.read() as session:
        await require_tenant(AdminRepository(session), tenant_id)
        rows, more = page_of(
            await MessageTurnRepository(session).list(
                tenant_id, session_id=session_id, after=after, limit=limit
            ),
            limit,
        )
    return list_page([message_turn_view(r) for r in rows], more, lambda t: t.id)
