"""The console's few writes, each the admin API's own: disable or enable a tenant,
rotate its cache salt, purge its data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentic_api.operator.handlers.admin.views import tenant_view
from agentic_api.operator.queries.admin import AdminRepository
from agentic_api.operator.shapes.admin import AdminTenant
from agentic_api.runtime import Runtime

Action = Literal["disable", "enable", "rotate_salt", "purge"]
ACTIONS: dict[Action, str] = {
    "disable": "Disable the tenant: its API keys stop working until it is enabled again.",
    "enable": "Enable the tenant: its API keys work again.",
    "rotate_salt": "Rotate the tenant's cache salt: every prefix cached for it is lost.",
    "purge": "Purge all of the tenant's responses, items, events, conversations and recorded "
    "Messages turns. The tenant and its keys stay. This cannot be undone.",
}


@dataclass(frozen=True)
class ActionDone:
    tenant: AdminTenant
    # Rows deleted per table, for a purge.
    deleted: dict[str, int] | None


async def apply_action(services: Runtime, tenant_id: str, action: Action) -> ActionDone | None:
    """One write transaction; None when there is no such tenant (nothing changed)."""
    async with services.db.write() as session:
        repo = AdminRepository(session)
        deleted = None
        if action == "purge":
            if await repo.tenants.get(tenant_id) is None:
                return None
            deleted = await repo.purge_tenant_data(tenant_id)
            tenant = await repo.tenants.get(tenant_id)
        elif action == "rotate_salt":
            tenant = await repo.rotate_salt(tenant_id)
        else:
            tenant = await repo.set_disabled(tenant_id, action == "disable")
        if tenant is None:
            return None
        return ActionDone(tenant_view(tenant), deleted)


async def tenant_for_action(services: Runtime, tenant_id: str) -> AdminTenant | None:
    async with services.db.read() as session:
        tenant = await AdminRepository(session).tenants.get(tenant_id)
    return None if tenant is None else tenant_view(tenant)
