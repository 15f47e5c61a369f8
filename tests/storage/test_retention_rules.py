"""The retention rules (``storage/retention.py``) against both databases, on rows written
directly: what a sweep may take and what it must leave (the process test,
``tests/process/test_retention.py``, drives the same through a running server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentic_api.storage.database import Database
from agentic_api.storage.models import Conversation, Response
from agentic_api.storage.retention import RetentionRepository
from agentic_api.storage.tenants import TenantRepository

NOW = datetime(2026, 12, 4, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=1)
OLD = NOW - timedelta(days=3)


async def _tenant(db: Database) -> str:
    async with db.write() as session:
        return (await TenantRepository(session).create("retention")).id


def _response(
    tenant_id: str,
    response_id: str,
    *,
    parent: str | None = None,
    conversation: str | None = None,
    status: str = "completed",
    created_at: datetime = OLD,
) -> Response:
    return Response(
        id=response_id,
        tenant_id=tenant_id,
        conversation_id=conversation,
        previous_response_id=parent,
        session_id="session",
        status=status,
        model="m",
        created_at=created_at,
        updated_at=created_at,
        body={},
        request={},
        fingerprint={},
        fingerprint_digest="0" * 64,
        salt_epoch=0,
    )


def _conversation(tenant_id: str, conversation_id: str) -> Conversation:
    return Conversation(
        id=conversation_id,
        tenant_id=tenant_id,
        created_at=OLD,
        updated_at=OLD,
        metadata_={},
        next_position=0,
        version=0,
    )


async def _add(db: Database, *rows: object) -> None:
    async with db.write() as session:
        for row in rows:
            session.add(row)
            await session.flush()


async def test_a_running_or_continued_response_is_never_chosen(db: Database) -> None:
    tenant = await _tenant(db)
    await _add(
        db,
        _response(tenant, "resp_running", status="in_progress"),
        _response(tenant, "resp_queued", status="queued"),
        _response(tenant, "resp_root"),
        _response(tenant, "resp_tip", parent="resp_root", created_at=NOW),
        _response(tenant, "resp_leaf"),
    )
    async with db.read() as session:
        chosen = await RetentionRepository(session).old_responses(CUTOFF, 10)
    assert chosen == ["resp_leaf"]


async def test_a_continuation_committed_after_the_choice_keeps_its_parent(db: Database) -> None:
    tenant = await _tenant(db)
    await _add(db, _response(tenant, "resp_parent"))
    async with db.read() as session:
        chosen = await RetentionRepository(session).old_responses(CUTOFF, 10)
    assert chosen == ["resp_parent"]
    await _add(db, _response(tenant, "resp_child", parent="resp_parent", created_at=NOW))
    async with db.write() as session:
        assert await RetentionRepository(session).delete_responses(chosen) == 0
    async with db.read() as session:
        assert await session.get(Response, "resp_parent") is not None


async def test_a_conversation_forked_from_outside_stays_until_the_fork_goes(
    db: Database,
) -> None:
    tenant = await _tenant(db)
    await _add(
        db,
        _conversation(tenant, "conv_forked"),
        _conversation(tenant, "conv_running"),
        _conversation(tenant, "conv_idle"),
        _response(tenant, "resp_in_forked", conversation="conv_forked"),
        _response(tenant, "resp_fork", parent="resp_in_forked"),
        _response(tenant, "resp_in_running", conversation="conv_running", status="in_progress"),
        _response(tenant, "resp_in_idle", conversation="conv_idle"),
    )
    async with db.read() as session:
        chosen = await RetentionRepository(session).old_conversations(CUTOFF, 10)
    assert chosen == ["conv_idle"]
    async with db.write() as session:
        repo = RetentionRepository(session)
        assert await repo.delete_conversations(chosen, CUTOFF) == 1
        # The fork is an old leaf of its own: it goes, and then the conversation may.
        assert await repo.delete_responses(await repo.old_responses(CUTOFF, 10)) == 1
    async with db.read() as session:
        repo = RetentionRepository(session)
        assert await session.get(Response, "resp_in_idle") is None
        assert await repo.old_conversations(CUTOFF, 10) == ["conv_forked"]
