"""A response's lineage for the console: the admin lineage view itself (ancestors and
every fork continued from it), or None where the admin API answers 404."""

from __future__ import annotations

from agentic_api.errors import NotFound
from agentic_api.operator.handlers.admin import lineage as admin_lineage
from agentic_api.operator.shapes.admin import AdminLineage
from agentic_api.runtime import Runtime


async def response_lineage(services: Runtime, response_id: str) -> AdminLineage | None:
    """Two recursive statements, whatever the depth and the number of forks."""
    try:
        return await admin_lineage.response_lineage(services, response_id)
    except NotFound:
        return None
