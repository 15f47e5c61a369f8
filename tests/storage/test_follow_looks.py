"""A follower of a stored stream (``background/follow.py``) polls every 100 ms; on SQLite
it reads the change mark first and runs no read transaction while nobody has committed
since its last look found nothing new (before: two statements every poll, 20 a second per
follower), and still sees every event another connection commits, up to the terminal one."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from sqlalchemy import event as sql_events

from agentic_api.background.follow import follow
from agentic_api.storage.database import Database
from agentic_api.storage.responses import ResponseRepository
from tests.storage.test_turn_store import new_tenant, sample_row


class Statements:
    """Counts the statements a Database's sessions send (not the process's: other tests'
    servers share this event loop, and their sweeps run while this test sleeps)."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        for engine in {db.engine, db.turn_engine}:
            sql_events.listen(engine.sync_engine, "before_cursor_execute", self._counted)

    def _counted(self, *_args: Any) -> None:
        self.count += 1


def event(sequence: int, kind: str) -> tuple[int, str]:
    return sequence, orjson.dumps({"type": kind, "sequence_number": sequence}).decode()


async def test_a_follower_reads_nothing_while_nobody_commits(
    sqlite_db: Database, sqlite_file_url: str
) -> None:
    db = sqlite_db
    tenant_id = await new_tenant(db)
    row = sample_row("resp_followed", tenant_id)
    row.status = "in_progress"
    async with db.write() as session:
        await ResponseRepository(session).insert(row, [])
        await ResponseRepository(session).add_events(row.id, [event(0, "response.created")])

    seen: list[int] = []

    async def read_all() -> None:
        async for sequence, _data in follow(db, row.id, None):
            seen.append(sequence)

    statements = Statements(db)
    following = asyncio.create_task(read_all())
    writer = Database.from_url(sqlite_file_url)
    try:
        await asyncio.sleep(0.5)  # its first looks: the stored event, then nothing new
        assert seen == [0]
        before = statements.count
        await asyncio.sleep(1.0)  # ten polls
        assert statements.count - before == 0
        # Another connection (as a worker in another process would) stores an event.
        async with writer.write() as session:
            await ResponseRepository(session).add_events(
                row.id, [event(1, "response.output_text.delta")]
            )
        await asyncio.sleep(0.5)
        assert seen == [0, 1]
        async with writer.write() as session:
            responses = ResponseRepository(session)
            await responses.add_events(row.id, [event(2, "response.completed")])
            await responses.set_state(row.id, status="completed", body={"id": row.id})
        await asyncio.wait_for(following, timeout=10)
        assert seen == [0, 1, 2]
    finally:
        following.cancel()
        await writer.close()
