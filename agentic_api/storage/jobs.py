"""The background queue: enqueue, claim, lease, finish, recover (``background_jobs``).

Every write a worker makes after its claim names the claim's token, so a worker that
lost its job (cancelled, or presumed dead and recovered) cannot change it any more:
its statements match no row and the caller rolls back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from agentic_api.storage.models import BackgroundJob

QUEUED = "queued"
RUNNING = "running"


@dataclass(frozen=True)
class ClaimedJob:
    response_id: str
    tenant_id: str
    claim_token: str
    attempts: int


@dataclass(frozen=True)
class ExpiredJob:
    response_id: str
    tenant_id: str
    claim_token: str
    attempts: int
    started: bool


class JobRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def enqueue(
        self,
        response_id: str,
        tenant_id: str,
        now: datetime,
        *,
        window_rank: int = 0,
        continuation_id: str | None = None,
    ) -> None:
        self.session.add(
            BackgroundJob(
                response_id=response_id,
                tenant_id=tenant_id,
                status=QUEUED,
                enqueued_at=now,
                attempts=0,
                window_rank=window_rank,
                continuation_id=continuation_id,
            )
        )
        await self.session.flush()

    async def queued_count(self) -> int:
        query = (
            select(func.count()).select_from(BackgroundJob).where(BackgroundJob.status == QUEUED)
        )
        return int((await self.session.execute(query)).scalar_one())

    async def claim_next(
        self, *, worker_id: str, token: str, now: datetime, lease_until: datetime
    ) -> ClaimedJob | None:
        """Takes the next queued job, or returns None: the lowest completion-window rank
        first, the oldest within it; a job whose continuation group (tenant and
        ``continuation_id``) has an earlier job queued or running waits its turn.

        One statement on both databases. PostgreSQL: the subquery's ``FOR UPDATE SKIP
        LOCKED`` lets concurrent workers pass over a row another is claiming rather than
        queue behind it, and the outer ``status`` check re-reads the row once locked.
        SQLite ignores the locking clause; the write transaction (``BEGIN IMMEDIATE``)
        already serializes every claim, so the ``status`` check is what makes it atomic.
        """
        earlier = aliased(BackgroundJob)
        earlier_in_group = (
            select(earlier.response_id)
            .where(
                earlier.tenant_id == BackgroundJob.tenant_id,
                earlier.continuation_id == BackgroundJob.continuation_id,
                or_(
                    earlier.status == RUNNING,
                    earlier.enqueued_at < BackgroundJob.enqueued_at,
                    and_(
                        earlier.enqueued_at == BackgroundJob.enqueued_at,
                        earlier.response_id < BackgroundJob.response_id,
                    ),
                ),
            )
            .exists()
        )
        oldest = (
            select(BackgroundJob.response_id)
            .where(
                BackgroundJob.status == QUEUED,
                or_(BackgroundJob.continuation_id.is_(None), ~earlier_in_group),
            )
            .order_by(
                BackgroundJob.window_rank, BackgroundJob.enqueued_at, BackgroundJob.response_id
            )
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        claimed = await self.session.execute(
            update(BackgroundJob)
            .where(BackgroundJob.response_id == oldest, BackgroundJob.status == QUEUED)
            .values(
                status=RUNNING,
                claim_token=token,
                worker_id=worker_id,
                claimed_at=now,
                started_at=None,
                lease_expires_at=lease_until,
                attempts=BackgroundJob.attempts + 1,
            )
            .returning(BackgroundJob.response_id, BackgroundJob.tenant_id, BackgroundJob.attempts)
        )
        row = claimed.one_or_none()
        if row is None:
            return None
        return ClaimedJob(row.response_id, row.tenant_id, token, int(row.attempts))

    async def mark_started(
        self, response_id: str, token: str, *, now: datetime, lease_until: datetime
    ) -> bool:
        return await self._update_held(
            response_id, token, started_at=now, lease_expires_at=lease_until
        )

    async def renew(self, response_id: str, token: str, lease_until: datetime) -> bool:
        """Extends the lease; False when the job is no longer this claim's."""
        return await self._update_held(response_id, token, lease_expires_at=lease_until)

    async def holds(self, response_id: str, token: str) -> bool:
        query = select(BackgroundJob.response_id).where(
            BackgroundJob.response_id == response_id, BackgroundJob.claim_token == token
        )
        return (await self.session.execute(query)).first() is not None

    async def finish(self, response_id: str, token: str) -> bool:
        """Removes the job as its claim ends it (in the transaction of the terminal write)."""
        result = await self.session.execute(
            delete(BackgroundJob).where(
                BackgroundJob.response_id == response_id, BackgroundJob.claim_token == token
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def remove(self, response_id: str) -> bool:
        """Removes the job whoever holds it (a cancel). On PostgreSQL this waits for a
        worker's write in flight on the row, so nothing of that worker lands after it."""
        result = await self.session.execute(
            delete(BackgroundJob).where(BackgroundJob.response_id == response_id)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def expired(self, now: datetime, limit: int = 100) -> Sequence[ExpiredJob]:
        query = (
            select(
                BackgroundJob.response_id,
                BackgroundJob.tenant_id,
                BackgroundJob.claim_token,
                BackgroundJob.attempts,
                BackgroundJob.started_at,
            )
            .where(BackgroundJob.status == RUNNING, BackgroundJob.lease_expires_at < now)
            .order_by(BackgroundJob.lease_expires_at)
            .limit(limit)
        )
        rows = (await self.session.execute(query)).all()
        return [
            ExpiredJob(
                r.response_id, r.tenant_id, r.claim_token, r.attempts, r.started_at is not None
            )
            for r in rows
            if r.claim_token is not None
        ]

    async def earliest_lease_end(self) -> datetime | None:
        """When the first lease still held runs out (None: no job is running): until
        then, and while nothing is committed, no job can expire."""
        query = select(func.min(BackgroundJob.lease_expires_at)).where(
            BackgroundJob.status == RUNNING
        )
        end: datetime | None = (await self.session.execute(query)).scalar_one()
        return end

    async def requeue_expired(self, response_id: str, token: str, now: datetime) -> bool:
        """Puts a job whose worker vanished before starting it back in the queue (only if
        that claim still holds it and its lease is still expired)."""
        result = await self.session.execute(
            update(BackgroundJob)
            .where(
                BackgroundJob.response_id == response_id,
                BackgroundJob.claim_token == token,
                BackgroundJob.lease_expires_at < now,
            )
            .values(
                status=QUEUED,
                claim_token=None,
                worker_id=None,
                claimed_at=None,
                started_at=None,
                lease_expires_at=None,
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def finish_expired(self, response_id: str, token: str, now: datetime) -> bool:
        """Removes a job whose worker vanished (same conditions as ``requeue_expired``)."""
        result = await self.session.execute(
            delete(BackgroundJob).where(
                BackgroundJob.response_id == response_id,
                BackgroundJob.claim_token == token,
                BackgroundJob.lease_expires_at < now,
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def _update_held(self, response_id: str, token: str, **values: object) -> bool:
        result = await self.session.execute(
            update(BackgroundJob)
            .where(BackgroundJob.response_id == response_id, BackgroundJob.claim_token == token)
            .values(**values)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]
