"""Every subagent of a tree stored as a response of its own: a branch of the root's session.

A subagent's work is a turn like any other: it saw a prefix (its parent's prompt as the
spawning round sent it, then its task) and produced items. It is stored, in the **same
transaction** as the response whose tree spawned it (a turn is all-or-nothing: there is
no subagent without its root, nor a root without its subagents), as a response that can
be retrieved, its input items listed, and continued with ``previous_response_id``.

Its chain: the root's response is only written at the end, and a subagent saw the root's
history only up to the round that spawned it, never the root's later rounds, so the root
cannot be its ``previous_response_id`` (continuing it would replay what it never saw).
Its ``previous_response_id`` is the stored turn the root itself continued (the last
checkpoint every agent of the tree shares), and everything it saw after that (the root's
new input, the rounds before the spawn, its task) is its input. A tree that starts afresh
(or inside a conversation, whose items are not a response chain) gives its subagents no
``previous_response_id``: all they saw is their input. Either way their session is the
root's, their prefix digest their own, and ``spawned_by`` names the response that spawned
them (the admin agents view lists them from it; the spawn's result tells the model and
the client the subagent's response id).

Status: a subagent that completed its last task is ``completed``; one that errored is
``failed`` (its error the message its parent read); one interrupted is ``cancelled``. As
for any turn, only a completed one keeps its output items for a continuation (the others
keep their input, and show what they produced in ``output``).

Its token ids: a completed subagent whose rounds all reported ids keeps its last round's
prompt and output ids as its token artifact, exactly as a turn keeps its last round's
(``turns/runner/tokens.py``), bound to the root's fingerprint and salt epoch (its row's):
a continuation from it is accounted against them, and gets the same token account,
``prompt_cache_diagnostics`` and residency view as any continuation. Made from what the
rounds already returned (nothing is asked of anyone at the commit); one that cannot be
made is left out, never a failed commit (its continuations' account says "unknown").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.cache.codec import ENCODING, pack_ids
from agentic_api.log import get_logger
from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.responses import NewItem, ResponseRepository
from agentic_api.storage.token_artifacts import TokenArtifactRepository
from agentic_api.turns.data.prepared import CONTINUABLE, PreparedTurn
from agentic_api.turns.kinds.multi_agent.tree import Agent
from agentic_api.turns.prepare.history import salt_identity
from agentic_api.upstream.token_fields import ReportedTokens
from agentic_api.wire.items import Item
from agentic_api.wire.response_object import finish_response
from lineage import prefix_digest

# The items of an agent's own rounds that a Response's ``output`` shows (its action
# results are inputs of its next round, as for any function call), its compaction items
# included, as a single-agent response lists the compaction it made.
_SHOWN = frozenset({"message", "reasoning", "function_call", "compaction"})

_STATUS = {"completed": "completed", "errored": "failed", "interrupted": "cancelled"}

log = get_logger("agentic_api.turns.multi_agent")


def subagent_rows(
    turn: PreparedTurn, root: Response, agents: Iterable[Agent]
) -> list[tuple[Response, list[NewItem]]]:
    """The rows of ``agents`` (subagents of ``turn``'s tree, ``root`` its stored row)."""
    chained = (
        turn.parent is not None
        and turn.conversation is None
        and len(turn.history) == turn.parent.history_item_count
    )
    previous = turn.parent.id if chained and turn.parent is not None else None
    stored = len(turn.history) if chained else 0
    # Siblings of the root in its chain (or the root of a chain of their own).
    depth = turn.lineage.depth if chained else 0
    return [_row(turn, root, agent, previous, stored, depth) for agent in agents]


def _row(
    turn: PreparedTurn,
    root: Response,
    agent: Agent,
    previous: str | None,
    stored: int,
    depth: int,
) -> tuple[Response, list[NewItem]]:
    assert agent.response_id is not None
    status = _STATUS.get(agent.status, "failed")
    continuable = status in CONTINUABLE
    new_input = agent.items[stored : agent.started_with]
    own = agent.items[agent.started_with :]
    visible = agent.items if continuable else []
    now = datetime.now(UTC)
    error = None
    if status == "failed":
        error = {"code": "server_error", "message": agent.error or f"{agent.name} failed."}
    final = finish_response(
        {
            **turn.base,
            "id": agent.response_id,
            "previous_response_id": previous,
            "conversation": None,
        },
        status=status,
        output=[_shown(item) for item in own if item.type in _SHOWN],
        usage=agent.usage,
        completed_at=int(now.timestamp()),
        error=error,
    )
    request = turn.request.model_dump(mode="json", exclude_none=True)
    request.pop("conversation", None)
    request["previous_response_id"] = previous
    row = Response(
        id=agent.response_id,
        tenant_id=root.tenant_id,
        conversation_id=None,
        previous_response_id=previous,
        session_id=root.session_id,
        depth=depth,
        status=status,
        model=root.model,
        created_at=root.created_at,
        completed_at=now if status == "completed" else None,
        updated_at=now,
        store=True,
        background=root.background,
        body=final,
        request=request,
        error=error,
        input_tokens=agent.usage.get("input_tokens"),
        cached_tokens=(agent.usage.get("input_tokens_details") or {}).get("cached_tokens"),
        output_tokens=agent.usage.get("output_tokens"),
        fingerprint=root.fingerprint,
        fingerprint_digest=root.fingerprint_digest,
        fingerprint_changes=[],
        salt_epoch=root.salt_epoch,
        prefix_digest=(
            prefix_digest(
                root.model,
                salt_identity(root.tenant_id, root.salt_epoch),
                (item.data for item in visible),
            )
            if continuable
            else None
        ),
        history_item_count=len(visible),
        input_item_count=len(new_input),
        output_item_count=len(own) if continuable else 0,
        spawned_by=root.id,
        agent_name=agent.name,
    )
    items = [NewItem(i.id, "input", i.type, i.data.decode()) for i in new_input]
    if continuable:
        items += [NewItem(i.id, "output", i.type, i.data.decode()) for i in own]
    return row, items


def _shown(item: Item) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(item.data)
    return value


def subagent_artifact(turn: PreparedTurn, row: Response, agent: Agent) -> TokenArtifactRow | None:
    """The token artifact of a subagent stored as ``row``: its last round's prompt and
    output ids, when it is continuable and every one of its rounds reported ids (a round
    without them leaves which ids the last one had in doubt); None otherwise."""
    relay = agent.relay
    if row.prefix_digest is None or relay is None or not agent.rounds:
        return None
    rounds = relay.token_rounds
    if len(rounds) != agent.rounds or not all(isinstance(r, ReportedTokens) for r in rounds):
        return None
    last = rounds[-1]
    assert isinstance(last, ReportedTokens)
    return TokenArtifactRow(
        response_id=row.id,
        tenant_id=row.tenant_id,
        created_at=datetime.now(UTC),
        model=row.model,
        # The tokenizer identity the turn's fingerprint was bound to (tokens.py), as the
        # root's own artifact names it.
        tokenizer=turn.fingerprint.tokenizer,
        fingerprint_digest=row.fingerprint_digest,
        salt_epoch=row.salt_epoch,
        encoding=ENCODING,
        prompt_count=len(last.prompt),
        output_count=len(last.output),
        prompt_ids=pack_ids(last.prompt),
        output_ids=pack_ids(last.output),
        output_types=[item.type for item in agent.items[agent.started_with :]],
    )


def _artifact_or_none(turn: PreparedTurn, row: Response, agent: Agent) -> TokenArtifactRow | None:
    try:
        return subagent_artifact(turn, row, agent)
    except Exception:
        # The ids only serve accounting: a bug here must not cost the tree its commit.
        log.exception("subagent token artifact not made", response_id=row.id)
        return None


async def store_subagents(
    session: AsyncSession, turn: PreparedTurn, root: Response, agents: Iterable[Agent]
) -> None:
    """Writes the subagents' rows, and their token artifacts, in the root's commit (a
    step of its transaction)."""
    repo = ResponseRepository(session)
    artifacts = TokenArtifactRepository(session)
    agents = list(agents)
    for agent, (row, items) in zip(agents, subagent_rows(turn, root, agents), strict=True):
        await repo.insert(row, items)
        artifact = _artifact_or_none(turn, row, agent)
        if artifact is not None:
            await artifacts.insert(artifact)
