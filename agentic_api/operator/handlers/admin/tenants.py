"""The tenant lifecycle: list, create, get, disable/enable, rotate the cache salt, and
its API keys (list, issue, revoke). Callers forget cached keys after a change commits."""

from __future__ import annotations

from agentic_api.errors import Conflict, NotFound
from agentic_api.operator.handlers.admin.views import issued_view, key_view, list_page, tenant_view
from agentic_api.operator.queries.admin import AdminRepository, DuplicateTenantName
from agentic_api.operator.shapes.admin import (
    AdminApiKey,
    AdminTenant,
    IssuedApiKey,
    ListPage,
    TenantCreated,
)
from agentic_api.runtime import Runtime
from agentic_api.serving.pagination import page_of
from agentic_api.storage.models import Tenant


def tenant_not_found(tenant_id: str) -> NotFound:
    return NotFound(f"No tenant with id '{tenant_id}'.", param="tenant_id")


async def require_tenant(repo: AdminRepository, tenant_id: str) -> Tenant:
    tenant = await repo.tenants.get(tenant_id)
    if tenant is None:
        raise tenant_not_found(tenant_id)
    return tenant


async def list_tenants(services: Runtime, after: str | None, limit: int) -> ListPage[AdminTenant]:
    async with services.db.read() as session:
        rows, more = page_of(
            await AdminRepository(session).list_tenants(after=after, limit=limit), limit
        )
    return list_page([tenant_view(r) for r in rows], more, lambda t: t.id)


async def create_tenant(services: Runtime, name: str, key_name: str | None) -> TenantCreated:
    try:
        async with services.db.write() as session:
            repo = AdminRepository(session)
            tenant, key, issued = await repo.create_tenant(name, key_name)
    except DuplicateTenantName as exc:
        raise Conflict(
            f"A tenant named '{name}' already exists.", param="name", code="tenant_exists"
        ) from exc
    return TenantCreated(tenant=tenant_view(tenant), api_key=issued_view(key, issued))


async def get_tenant(services: Runtime, tenant_id: str) -> AdminTenant:
    async with services.db.read() as session:
        return tenant_view(await require_tenant(AdminRepository(session), tenant_id))


async def set_disabled(services: Runtime, tenant_id: str, disabled: bool) -> AdminTenant:
    async with services.db.write() as session:
        tenant = await AdminRepository(session).set_disabled(tenant_id, disabled)
    if tenant is None:
        raise tenant_not_found(tenant_id)
    return tenant_view(tenant)


async def rotate_salt(services: Runtime, tenant_id: str) -> AdminTenant:
    async with services.db.write() as session:
        tenant = await AdminRepository(session).rotate_salt(tenant_id)
    if tenant is None:
        raise tenant_not_found(tenant_id)
    return tenant_view(tenant)


async def list_api_keys(
    services: Runtime, tenant_id: str, after: str | None, limit: int
) -> ListPage[AdminApiKey]:
    async with services.db.read() as session:
        repo = AdminRepository(session)
        await require_tenant(repo, tenant_id)
        rows, more = page_of(await repo.list_keys(tenant_id, after=after, limit=limit), limit)
    return list_page([key_view(r) for r in rows], more, lambda k: k.id)


async def issue_api_key(services: Runtime, tenant_id: str, name: str | None) -> IssuedApiKey:
    async with services.db.write() as session:
        repo = AdminRepository(session)
        tenant = await require_tenant(repo, tenant_id)
        key, issued = await repo.issue_key(tenant, name)
    return issued_view(key, issued)


async def revoke_api_key(services: Runtime, tenant_id: str, key_id: str) -> AdminApiKey:
    async with services.db.write() as session:
        key = await AdminRepository(session).revoke_key(tenant_id, key_id)
    if key is None:
        raise NotFound(f"Tenant '{tenant_id}' has no API key '{key_id}'.", param="key_id")
    return key_view(key)
