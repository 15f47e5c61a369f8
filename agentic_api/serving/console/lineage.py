"""A response's lineage: its ancestors and every fork continued from it, as the admin
lineage view builds them."""

from __future__ import annotations

from agentic_api.services import Services
from agentic_api.serving.admin.timeline import present_chain, present_tree
from agentic_api.storage.admin import AdminRepository
from agentic_api.wire.admin import MAX_DESCENDANTS, AdminLineage


async def response_lineage(services: Services, response_id: str) -> AdminLineage | None:
    """Two recursive statements, whatever the depth and the number of forks."""
    async with services.db.read() as session:
        repo = AdminRepository(session)
        chain = await repo.ancestors(response_id)
        if not chain:
            return None
        descendants = await repo.descendants(response_id, limit=MAX_DESCENDANTS)
    shown = descendants[:MAX_DESCENDANTS]
    return AdminLineage(
        response_id=response_id,
        tenant_id=chain[-1].tenant_id,
        ancestors=present_chain(chain),
        descendants=present_tree(chain[-1], shown),
        descendant_count=len(shown),
        truncated=len(descendants) > MAX_DESCENDANTS,
    )
