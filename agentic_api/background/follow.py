"""Following a response's stored event stream: what was stored after a cursor, then each
new event as it is stored, until the terminal one (a background job running anywhere,
or a finished stream being replayed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson

from agentic_api.background.look_gate import LookGate
from agentic_api.storage.database import Database
from agentic_api.storage.responses import ResponseRepository
from agentic_api.wire.events import TERMINAL_EVENTS, TERMINAL_STATUSES

# How often a follower looks for new events of a response that is still running.
FOLLOW_POLL_SECONDS = 0.1


async def follow(
    db: Database, response_id: str, after: int | None
) -> AsyncIterator[tuple[int, str]]:
    """A response's stored events after ``after``, then each new one as it is stored,
    until its terminal event: works from any process, before the job has even started."""
    cursor = -1 if after is None else after
    gate = LookGate()
    while True:
        mark = db.change_mark()
        if gate.may_skip(mark):
            # Nobody has committed anything since the last look found nothing new.
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
            continue
        async with db.read() as session:
            repo = ResponseRepository(session)
            # Status first: a terminal write stores its events in the same transaction,
            # so once the status reads terminal every event is visible to the next query.
            status = await repo.status_of(response_id)
            batch = await repo.events(response_id, cursor)
        for sequence, data in batch:
            yield sequence, data
            cursor = sequence
            if orjson.loads(data).get("type") in TERMINAL_EVENTS:
                return
        if not batch and (status is None or status in TERMINAL_STATUSES):
            return
        if batch:
            gate.forget()
        else:
            gate.looked(mark)
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
