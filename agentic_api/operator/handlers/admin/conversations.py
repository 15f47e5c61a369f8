"""A tenant's conversations as the operator sees them: listed (with filters), one, its
timeline of turns, and the two destructive actions (delete one, purge all data)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from agentic_api.errors import InvalidRequest, NotFound
from agentic_api.operator.handlers.admin.keep_warm import annotate_rewarms
from agentic_api.operator.handlers.admin.residency import annotate_timeline
from agentic_api.operator.handlers.admin.tenants import require_tenant
from agentic_api.operator.handlers.admin.timeline import present_timeline
from agentic_api.operator.handlers.admin.views import conversation_view, list_page
from agentic_api.operator.queries.admin import AdminRepository, ConversationFilter
from agentic_api.operator.shapes.admin import AdminConversation, AdminTurn, Deletion, ListPage
from agentic_api.runtime import Runtime
from agentic_api.serving.pagination import page_of


def at(seconds: int | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def conversation_not_found(conversation_id: str) -> NotFound:
    return NotFound(f"No conversation with id '{conversation_id}'.", param="conversation_id")


async def list_conversations(
    services: Runtime,
    tenant_id: str,
    *,
    updated_since: int | None,
    model: str | None,
    metadata: Sequence[tuple[str, str]],
    after: str | None,
    limit: int,
) -> ListPage[AdminConversation]:
    filters = ConversationFilter(at(updated_since), model, tuple(metadata))
    async with services.db.read() as session:
        repo = AdminRepository(session)
        await require_tenant(repo, tenant_id)
        cursor = None
        if after is not None:
            cursor = await repo.get_conversation(tenant_id, after)
            if cursor is None:
                raise InvalidRequest(
                    f"Unknown cursor: no conversation '{after}'.",
                    param="after",
                    code="invalid_value",
                )
        rows = await repo.list_conversations(tenant_id, filters, after=cursor, limit=limit)
    page, more = page_of(rows, limit)
    return list_page([conversation_view(r) for r in page], more, lambda c: c.id)


async def get_conversation(
    services: Runtime, tenant_id: str, conversation_id: str
) -> AdminConversation:
    async with services.db.read() as session:
        row = await AdminRepository(session).get_conversation(tenant_id, conversation_id)
    if row is None:
        raise conversation_not_found(conversation_id)
    return conversation_view(row)


async def timeline(
    services: Runtime, tenant_id: str, conversation_id: str, after: str | None, limit: int
) -> ListPage[AdminTurn]:
    async with services.db.read() as session:
        repo = AdminRepository(session)
        if await repo.get_conversation(tenant_id, conversation_id) is None:
            raise conversation_not_found(conversation_id)
        rows, more = page_of(
            await repo.conversation_turns(tenant_id, conversation_id, after=after, limit=limit),
            limit,
        )
        before = await repo.turn_before(tenant_id, conversation_id, rows[0].id) if rows else None
    shown = present_timeline(rows, before)
    annotate_timeline(shown, rows, before, services.residency)
    annotate_rewarms(shown, services.keep_warm)
    return list_page(shown, more, lambda t: t.id)


async def delete_conversation(services: Runtime, tenant_id: str, conversation_id: str) -> Deletion:
    async with services.db.write() as session:
        counts = await AdminRepository(session).delete_conversation(tenant_id, conversation_id)
    if counts is None:
        raise conversation_not_found(conversation_id)
    return Deletion(tenant_id=tenant_id, conversation_id=conversation_id, deleted=counts)


async def purge_tenant_data(services: Runtime, tenant_id: str) -> Deletion:
    async with services.db.write() as session:
        repo = AdminRepository(session)
        await require_tenant(repo, tenant_id)
        counts = await repo.purge_tenant_data(tenant_id)
    return Deletion(tenant_id=tenant_id, conversation_id=None, deleted=counts)
