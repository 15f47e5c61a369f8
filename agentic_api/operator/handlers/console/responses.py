"""One response: its turn (explained against its parent), its token account, a
multi-agent response's tree of agents with each one's account, and its stored input and
output items, paged."""

from __future__ import annotations

from dataclasses import dataclass

from agentic_api.operator.handlers.admin.lineage import agents_of
from agentic_api.operator.handlers.admin.timeline import present_turn
from agentic_api.operator.queries.admin import AdminRepository
from agentic_api.operator.queries.console import ConsoleRepository, ItemRecord
from agentic_api.operator.shapes.admin import AdminTurn, AgentAccount
from agentic_api.runtime import Runtime


@dataclass(frozen=True)
class ResponseDetail:
    tenant_id: str
    session_id: str
    conversation_id: str | None
    turn: AdminTurn
    latency_seconds: float | None
    # This turn's own stored token ids (prompt, output), when kept.
    artifact_tokens: tuple[int, int] | None
    items: list[ItemRecord]
    has_more: bool
    # A multi-agent response's tree: each agent's token account and own response (empty
    # for any other).
    agents: list[AgentAccount]


async def response_detail(
    services: Runtime, response_id: str, *, after_position: int | None, limit: int
) -> ResponseDetail | None:
    async with services.db.read() as session:
        repo = ConsoleRepository(session)
        turn = await repo.turn(response_id)
        if turn is None:
            return None
        parent = None
        if turn.previous_response_id:
            found = await repo.turns_by_id(turn.tenant_id, [turn.previous_response_id])
            parent = found.get(turn.previous_response_id)
        artifact = await AdminRepository(session).token_artifact(response_id)
        latency = (await repo.latencies([response_id])).get(response_id)
        items = list(await repo.items(response_id, after_position=after_position, limit=limit))
        # Each agent's account and own response, for its link (subagents read only for a
        # multi-agent one, so any other page costs what it did).
        agents = await agents_of(session, turn.tenant_id, response_id)
    return ResponseDetail(
        tenant_id=turn.tenant_id,
        session_id=turn.session_id,
        conversation_id=turn.conversation_id,
        turn=present_turn(turn, parent),
        latency_seconds=latency,
        artifact_tokens=None
        if artifact is None
        else (artifact.prompt_count, artifact.output_count),
        items=items[:limit],
        has_more=len(items) > limit,
        agents=agents,
    )
