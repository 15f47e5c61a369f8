"""One response seen through its lineage: its ancestors and descendants, and its
token-level reuse account with the stored token ids' size."""

from __future__ import annotations

from agentic_api.errors import NotFound
from agentic_api.operator.handlers.admin.keep_warm import annotate_rewarms
from agentic_api.operator.handlers.admin.timeline import present_chain, present_tree
from agentic_api.operator.handlers.admin.token_account import account_view
from agentic_api.operator.queries.admin import AdminRepository
from agentic_api.operator.shapes.admin import (
    MAX_DESCENDANTS,
    AdminLineage,
    AdminTokenAccount,
    TokenArtifactInfo,
)
from agentic_api.runtime import Runtime


def _response_not_found(response_id: str) -> NotFound:
    return NotFound(f"No response with id '{response_id}'.", param="response_id")


async def response_lineage(services: Runtime, response_id: str) -> AdminLineage:
    async with services.db.read() as session:
        repo = AdminRepository(session)
        chain = await repo.ancestors(response_id)
        if not chain:
            raise _response_not_found(response_id)
        descendants = await repo.descendants(response_id, limit=MAX_DESCENDANTS)
    shown = descendants[:MAX_DESCENDANTS]
    ancestors = present_chain(chain)
    annotate_rewarms(ancestors, services.keep_warm)
    return AdminLineage(
        response_id=response_id,
        tenant_id=chain[-1].tenant_id,
        ancestors=ancestors,
        descendants=present_tree(chain[-1], shown),
        descendant_count=len(shown),
        truncated=len(descendants) > MAX_DESCENDANTS,
    )


async def token_account(services: Runtime, response_id: str) -> AdminTokenAccount:
    async with services.db.read() as session:
        repo = AdminRepository(session)
        chain = await repo.ancestors(response_id)
        if not chain:
            raise _response_not_found(response_id)
        artifact = await repo.token_artifact(response_id)
    turn = chain[-1]
    return AdminTokenAccount(
        response_id=turn.id,
        tenant_id=turn.tenant_id,
        model=turn.model,
        account=account_view(turn.token_account) if turn.token_account else None,
        artifact=None
        if artifact is None
        else TokenArtifactInfo(
            prompt_tokens=artifact.prompt_count,
            output_tokens=artifact.output_count,
            stored_bytes=len(artifact.prompt_ids) + len(artifact.output_ids),
            encoding=artifact.encoding,
            model=artifact.model,
            tokenizer=artifact.tokenizer,
            created_at=int(artifact.created_at.timestamp()),
        ),
    )
