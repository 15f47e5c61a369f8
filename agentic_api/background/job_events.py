"""A running background job's channel: its events go to the database as they come.

Events are written in batches (every ``BATCH_EVENTS`` events or ``FLUSH_SECONDS``), each
batch in a transaction that first renews the job's lease under its claim token. That one
statement is also how the worker learns it lost the job (cancelled from another process,
or recovered after its lease expired): it matches no row, nothing is written, and the run
is stopped. With no events to write, the loop still renews the lease every third of it
and checks the claim every poll interval.

At commit the turn asks ``unsaved``: the loop stops (finishing a batch in flight) and the
commit stores the rest, so no event is written twice and none after the terminal one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import orjson

from agentic_api.log import get_logger
from agentic_api.storage.database import Database
from agentic_api.storage.fault_log import log_step_failure
from agentic_api.storage.jobs import ClaimedJob, JobRepository
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.types import utcnow
from agentic_api.turns.runner.channel import Published, TurnChannel

log = get_logger("agentic_api.background.job_events")

BATCH_EVENTS = 16
FLUSH_SECONDS = 0.1


class JobEvents(TurnChannel):
    def __init__(
        self,
        db: Database,
        job: ClaimedJob,
        *,
        lease_seconds: float,
        poll_seconds: float,
        on_lost: Callable[[], None],
    ) -> None:
        super().__init__()
        self.db = db
        self.job = job
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.on_lost = on_lost
        self.saved_through = -1
        self.lost = False
        self._pending: list[Published] = []
        self._sealed = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    # The turn's side of the channel. Nobody reads it in this process: followers read
    # the database, from here or from any other server.
    def opened(self) -> None:
        pass

    def failed_to_open(self, error: BaseException) -> None:
        pass

    def publish(self, kind: str, sequence: int, data: bytes) -> None:
        if self._sealed:
            return
        self._pending.append((kind, sequence, data))
        if len(self._pending) >= BATCH_EVENTS:
            self._wake.set()

    def close(self) -> None:
        pass

    async def unsaved(self, events: Sequence[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        """Of the turn's events ``(sequence_number, json)``, those not stored yet."""
        await self.stop()
        return [e for e in events if e[0] > self.saved_through]

    def leftover(self) -> list[dict[str, Any]]:
        """Events published but not stored (the worker stores them when it ends the job)."""
        return [orjson.loads(data) for _kind, _sequence, data in self._pending]

    async def stop(self) -> None:
        self._sealed = True
        self._wake.set()
        if self._task is not None and not self._task.done():
            # wait() rather than await: a batch in flight finishes even if whoever stops
            # us is being cancelled (that cancellation still reaches them).
            await asyncio.wait({self._task})

    async def _run(self) -> None:
        renewed = checked = time.monotonic()
        while not self._sealed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_SECONDS)
            self._wake.clear()
            if self._sealed:
                return
            now = time.monotonic()
            try:
                if self._pending or now - renewed >= self.lease_seconds / 3:
                    held = await self._flush()
                    renewed = checked = now
                elif now - checked >= self.poll_seconds:
                    held = await self._holds()
                    checked = now
                else:
                    continue
            except Exception as exc:
                # A busy or unreachable database: keep the events and try again; if it
                # lasts past the lease the job is recovered and this claim is fenced off.
                log_step_failure(
                    log, "could not store background events", exc, response_id=self.job.response_id
                )
                continue
            if not held:
                log.info("background job lost its claim", response_id=self.job.response_id)
                self.lost = True
                self._sealed = True
                self.on_lost()
                return

    async def _flush(self) -> bool:
        batch = list(self._pending)
        lease_until = utcnow() + timedelta(seconds=self.lease_seconds)
        async with self.db.write() as session:
            if not await JobRepository(session).renew(
                self.job.response_id, self.job.claim_token, lease_until
            ):
                return False
            await ResponseRepository(session).add_events(
                self.job.response_id,
                [(sequence, data.decode()) for _kind, sequence, data in batch],
            )
        del self._pending[: len(batch)]
        if batch:
            self.saved_through = batch[-1][1]
        return True

    async def _holds(self) -> bool:
        async with self.db.read() as session:
            return await JobRepository(session).holds(self.job.response_id, self.job.claim_token)
