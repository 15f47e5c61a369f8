"""A multi-agent response and the subagents its tree stored go together (issue 37), on both
databases, on rows written directly: a delete marks the whole tree and drops what only
served it (stored events, token ids, the agents' rounds), retention prunes a tree in one
statement and only when nothing continues from any of its responses, and a conversation's
deletion takes its turns' subagents. (``tests/api/test_multi_agent_branches.py`` drives
the same through the SDK.)"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select

from agentic_api.operator.queries.admin import AdminRepository
from agentic_api.storage.database import Database
from agentic_api.storage.models import (
    AgentRoundRow,
    Response,
    ResponseEvent,
    ResponseItem,
    TokenArtifactRow,
)
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.retention import RetentionRepository
from tests.storage.test_retention_rules import (
    CUTOFF,
    NOW,
    OLD,
    _add,
    _conversation,
    _response,
    _tenant,
)

ROOT, ALPHA, BETA = "resp_root", "resp_alpha", "resp_beta"


def _subagent(tenant_id: str, response_id: str, root: str = ROOT, **kwargs: Any) -> Response:
    row = _response(tenant_id, response_id, **kwargs)
    row.spawned_by = root
    row.agent_name = f"/root/{response_id}"
    return row


def _hanging_off(tenant_id: str, response_id: str) -> list[object]:
    """One of each row that hangs off a stored response."""
    return [
        ResponseItem(
            response_id=response_id,
            position=0,
            tenant_id=tenant_id,
            item_id=f"msg_{response_id}",
            role="input",
            type="message",
            data="{}",
        ),
        ResponseEvent(response_id=response_id, sequence_number=0, data="{}"),
        TokenArtifactRow(
            response_id=response_id,
            tenant_id=tenant_id,
            created_at=OLD,
            model="m",
            tokenizer="",
            fingerprint_digest="0" * 64,
            salt_epoch=0,
            encoding="u32",
            prompt_count=0,
            output_count=0,
            prompt_ids=b"",
            output_ids=b"",
            output_types=[],
        ),
    ]


def _rounds(tenant_id: str, response_id: str) -> list[AgentRoundRow]:
    return [
        AgentRoundRow(
            response_id=response_id,
            agent_name=name,
            round=1,
            tenant_id=tenant_id,
            parent_agent=None if name == "/root" else "/root",
            input_tokens=10,
            cached_tokens=0,
            output_tokens=1,
        )
        for name in ("/root", "/root/resp_alpha", "/root/resp_beta")
    ]


async def _tree(
    db: Database, tenant: str, *, conversation: str | None = None, created_at: datetime = OLD
) -> None:
    """A root with two subagents, each with its items, events and token ids, and the
    tree's agent rounds."""
    rows: list[object] = [_response(tenant, ROOT, conversation=conversation, created_at=created_at)]
    for sub in (ALPHA, BETA):
        rows.append(_subagent(tenant, sub, created_at=created_at))
    for response_id in (ROOT, ALPHA, BETA):
        rows += _hanging_off(tenant, response_id)
    rows += _rounds(tenant, ROOT)
    await _add(db, *rows)


async def _count(db: Database, table: Any, column: Any, ids: list[str]) -> int:
    async with db.read() as session:
        query = select(func.count()).select_from(table).where(column.in_(ids))
        return int((await session.execute(query)).scalar_one())


TREE = [ROOT, ALPHA, BETA]


async def test_deleting_a_root_marks_its_subagents_and_drops_what_served_them(
    db: Database,
) -> None:
    tenant = await _tenant(db)
    await _tree(db, tenant)
    await _add(db, _response(tenant, "resp_other"), *_hanging_off(tenant, "resp_other"))
    async with db.write() as session:
        # A subagent is not deleted on its own: nothing changes.
        assert await ResponseRepository(session).mark_deleted(tenant, ALPHA) is None
    assert await _count(db, TokenArtifactRow, TokenArtifactRow.response_id, TREE) == 3
    async with db.write() as session:
        # Another tenant's delete finds nothing.
        assert await ResponseRepository(session).mark_deleted("ten_other", ROOT) is None
        gone = await ResponseRepository(session).mark_deleted(tenant, ROOT)
    assert gone is not None and gone[0] == ROOT and sorted(gone[1:]) == [ALPHA, BETA]
    async with db.read() as session:
        repo = ResponseRepository(session)
        for response_id in TREE:
            assert await repo.get(tenant, response_id) is None
        assert await repo.get(tenant, "resp_other") is not None
    assert await _count(db, ResponseEvent, ResponseEvent.response_id, TREE) == 0
    assert await _count(db, TokenArtifactRow, TokenArtifactRow.response_id, TREE) == 0
    assert await _count(db, AgentRoundRow, AgentRoundRow.response_id, TREE) == 0
    # Items stay: a descendant's history still replays them.
    assert await _count(db, ResponseItem, ResponseItem.response_id, TREE) == 3
    # Nobody else's rows went.
    assert await _count(db, TokenArtifactRow, TokenArtifactRow.response_id, ["resp_other"]) == 1
    async with db.write() as session:
        assert await ResponseRepository(session).mark_deleted(tenant, ROOT) is None


async def _old_tree(db: Database) -> str:
    """A tenant with an old tree, which retention chooses by its root: its subagents are
    never chosen alone, they go with it."""
    tenant = await _tenant(db)
    await _tree(db, tenant)
    async with db.read() as session:
        assert await RetentionRepository(session).old_responses(CUTOFF, 10) == [ROOT]
    return tenant


async def test_retention_prunes_a_tree_whole(db: Database) -> None:
    await _old_tree(db)
    chosen = [ROOT]
    async with db.write() as session:
        assert await RetentionRepository(session).delete_responses(chosen) == 3
    for table, column in (
        (Response, Response.id),
        (ResponseItem, ResponseItem.response_id),
        (ResponseEvent, ResponseEvent.response_id),
        (TokenArtifactRow, TokenArtifactRow.response_id),
        (AgentRoundRow, AgentRoundRow.response_id),
    ):
        assert await _count(db, table, column, TREE) == 0, table


async def test_a_continued_subagent_keeps_its_whole_tree(db: Database) -> None:
    tenant = await _old_tree(db)
    chosen = [ROOT]
    # A continuation of a subagent commits between the choice and the deletion.
    await _add(db, _response(tenant, "resp_more", parent=BETA, created_at=NOW))
    async with db.write() as session:
        repo = RetentionRepository(session)
        assert await repo.delete_responses(chosen) == 0
        assert await repo.old_responses(CUTOFF, 10) == []
    assert await _count(db, Response, Response.id, TREE) == 3
    assert await _count(db, AgentRoundRow, AgentRoundRow.response_id, TREE) == 3


async def test_a_subagent_whose_root_is_gone_is_pruned_alone(db: Database) -> None:
    tenant = await _tenant(db)
    await _add(db, _subagent(tenant, ALPHA, root="resp_gone"))
    async with db.write() as session:
        repo = RetentionRepository(session)
        chosen = await repo.old_responses(CUTOFF, 10)
        assert chosen == [ALPHA]
        assert await repo.delete_responses(chosen) == 1


async def test_a_conversation_goes_with_its_turns_subagents(db: Database) -> None:
    tenant = await _tenant(db)
    await _add(db, _conversation(tenant, "conv_a"))
    await _tree(db, tenant, conversation="conv_a")
    await _add(db, _response(tenant, "resp_fork", parent=ALPHA, created_at=NOW))
    async with db.read() as session:
        # A subagent some response continues from keeps the conversation.
        assert await RetentionRepository(session).old_conversations(CUTOFF, 10) == []
    async with db.write() as session:
        await session.execute(delete(Response).where(Response.id == "resp_fork"))
    async with db.write() as session:
        repo = RetentionRepository(session)
        chosen = await repo.old_conversations(CUTOFF, 10)
        assert chosen == ["conv_a"]
        assert await repo.delete_conversations(chosen, CUTOFF) == 1
    assert await _count(db, Response, Response.id, TREE) == 0
    assert await _count(db, AgentRoundRow, AgentRoundRow.response_id, TREE) == 0


async def test_the_operator_deleting_a_conversation_takes_its_turns_subagents(
    db: Database,
) -> None:
    tenant = await _tenant(db)
    await _add(db, _conversation(tenant, "conv_a"))
    await _tree(db, tenant, conversation="conv_a")
    # A continuation of a subagent holds the conversation's content too.
    await _add(db, _response(tenant, "resp_more", parent=ALPHA, created_at=NOW))
    async with db.write() as session:
        counts = await AdminRepository(session).delete_conversation(tenant, "conv_a")
    assert counts is not None
    assert counts["responses"] == 4 and counts["agent_rounds"] == 3
    assert counts["token_artifacts"] == 3
    assert await _count(db, Response, Response.id, [*TREE, "resp_more"]) == 0
