"""One response seen through its lineage: its ancestors and descendants, and its
token-level reuse account with the stored token ids' size."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.errors import NotFound
from agentic_api.operator.handlers.admin.keep_warm import annotate_rewarms
from agentic_api.operator.handlers.admin.placement import annotate_placements
from agentic_api.operator.handlers.admin.timeline import present_chain, present_tree
from agentic_api.operator.handlers.admin.token_account import account_view
from agentic_api.operator.queries.admin import AdminRepository, TurnRecord
from agentic_api.operator.shapes.admin import (
    MAX_DESCENDANTS,
    AdminAgentAccounts,
    AdminLineage,
    AdminTokenAccount,
    AgentAccount,
    AgentRoundView,
    FirstRequestReuse,
    TokenArtifactInfo,
)
from agentic_api.runtime import Runtime
from agentic_api.storage.agent_rounds import AgentRound, AgentRoundRepository


async def _chain(repo: AdminRepository, response_id: str) -> Sequence[TurnRecord]:
    """The response and its ancestors, root first; a 404 when there is no such response."""
    chain = await repo.ancestors(response_id)
    if not chain:
        raise NotFound(f"No response with id '{response_id}'.", param="response_id")
    return chain


async def response_lineage(services: Runtime, response_id: str) -> AdminLineage:
    async with services.db.read() as session:
        repo = AdminRepository(session)
        chain = await _chain(repo, response_id)
        descendants = await repo.descendants(response_id, limit=MAX_DESCENDANTS)
    shown = descendants[:MAX_DESCENDANTS]
    ancestors = present_chain(chain)
    annotate_rewarms(ancestors, services.keep_warm)
    annotate_placements(ancestors, services.placement)
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
        chain = await _chain(repo, response_id)
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


async def agent_accounts(services: Runtime, response_id: str) -> AdminAgentAccounts:
    """Each agent's token account of a multi-agent response, from its stored rounds."""
    async with services.db.read() as session:
        chain = await _chain(AdminRepository(session), response_id)
        turn = chain[-1]
        agents = await agents_of(session, turn.tenant_id, turn.id)
    return AdminAgentAccounts(response_id=turn.id, tenant_id=turn.tenant_id, agents=agents)


async def agents_of(session: AsyncSession, tenant_id: str, response_id: str) -> list[AgentAccount]:
    """Each agent's token account of a response, naming each agent's own response (its
    subagents' responses read only for a multi-agent one: no rounds, no second query)."""
    repo = AgentRoundRepository(session)
    rounds = await repo.for_response(tenant_id, response_id)
    if not rounds:
        return []
    stored = await repo.subagent_responses(tenant_id, response_id)
    return with_responses(accounts_of(rounds), response_id, stored)


def with_responses(
    accounts: list[AgentAccount], root_id: str, stored: dict[str, str]
) -> list[AgentAccount]:
    """The accounts naming each agent's own response: the root's is ``root_id``, a
    subagent's the one its tree stored (``stored``, by agent name)."""
    return [
        account.model_copy(update={"response_id": stored.get(account.agent_name)})
        if account.parent_agent is not None
        else account.model_copy(update={"response_id": root_id})
        for account in accounts
    ]


def accounts_of(rounds: list[AgentRound]) -> list[AgentAccount]:
    """The agents' accounts from their rounds (root first: names sort parents first)."""
    by_agent: dict[str, list[AgentRound]] = {}
    for one in rounds:
        by_agent.setdefault(one.agent_name, []).append(one)
    agents: list[AgentAccount] = []
    for name, own in sorted(by_agent.items()):
        first = own[0]
        reuse = None
        if first.expected_cached is not None and first.shared_prefix_tokens is not None:
            reuse = FirstRequestReuse(
                shared_prefix_tokens=first.shared_prefix_tokens,
                expected_cached=first.expected_cached,
                measured_cached=first.cached_tokens,
                hit=first.cached_tokens >= first.expected_cached,
            )
        agents.append(
            AgentAccount(
                agent_name=name,
                parent_agent=first.parent_agent,
                input_tokens=sum(r.input_tokens for r in own),
                cached_tokens=sum(r.cached_tokens for r in own),
                output_tokens=sum(r.output_tokens for r in own),
                first_request=reuse,
                rounds=[
                    AgentRoundView(
                        round=r.round,
                        input_tokens=r.input_tokens,
                        cached_tokens=r.cached_tokens,
                        output_tokens=r.output_tokens,
                    )
                    for r in own
                ],
            )
        )
    return agents
