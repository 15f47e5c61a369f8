"""Background workers: claim queued jobs, run each through the normal turn pipeline, and
recover jobs whose worker vanished.

Any number of processes (``serve`` with in-process workers, ``agentic-api worker``) may
share one database: a claim is one atomic statement (``background/queue.py`` explains the
job's life, ``storage/jobs.py`` the locking). A claimed job carries a lease its worker
renews while it runs; a job whose lease expired was left by a dead (or hung) process and
is recovered by any process's sweep, by this rule:

- it never reached the model (``started_at`` unset): it is queued again, at most
  ``MAX_ATTEMPTS`` claims in all, after which it fails like a started one;
- it had started: it is marked ``failed`` with code ``worker_lost`` and its event stream
  gets ``error`` and ``response.failed``. It is not re-run: the model may already have
  done the work (and its tool calls their effects), and a retry is the client's decision.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from opentelemetry.trace import SpanKind
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api import tracing
from agentic_api.background.job_events import JobEvents
from agentic_api.background.look_gate import LookGate
from agentic_api.background.queue import fail_job
from agentic_api.background.retention import prune_expired
from agentic_api.errors import ApiError, Conflict
from agentic_api.log import get_logger
from agentic_api.metrics import BACKGROUND_QUEUE_DEPTH, BACKGROUND_RECOVERED
from agentic_api.runtime import Runtime
from agentic_api.storage.fault_log import log_step_failure
from agentic_api.storage.idempotency import IdempotencyRepository
from agentic_api.storage.jobs import ClaimedJob, JobRepository
from agentic_api.storage.models import Response
from agentic_api.storage.responses import ResponseRepository, StoredItem
from agentic_api.storage.token_artifacts import TokenArtifactRepository
from agentic_api.storage.types import to_unix, utcnow
from agentic_api.turns.data.caller import Caller, Reservation
from agentic_api.turns.data.commit_steps import CommitHooks, CommitStep
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.turns.run import TurnFailed, run_turn
from agentic_api.wire.items import Item
from agentic_api.wire.requests import CreateResponseRequest
from lineage import mint_cache_salt

log = get_logger("agentic_api.background.worker")

MAX_ATTEMPTS = 3
PRUNE_EVERY_SECONDS = 60.0
# An idle worker's look at the queue, and the sweep's at the leases, each cost a read
# transaction (~2 ms of CPU on a small machine): at AGENTIC_BACKGROUND_POLL_SECONDS (0.5 s)
# that was most of an idle server's CPU. A job enqueued in this process wakes its workers
# at once (``BackgroundSignals.wakeup``); one enqueued by another process (an `agentic-api
# worker` beside `serve`, another HTTP worker whose own workers are busy) is found by
# polling. On SQLite each poll first reads the database's change mark
# (``Database.change_mark``, one pragma): while nobody has committed since an empty look,
# the look is skipped. Even so each wake of an idle process costs ~0.25 ms (measured:
# docs/benchmarks/overhead/README.md, stop 35), so each empty poll doubles the wait before
# the next, up to this many poll intervals.
IDLE_POLL_GROWTH = 8


def next_idle_wait(waited: float, poll_seconds: float) -> float:
    """The wait after an empty look at the queue that followed a wait of ``waited``."""
    return min(waited * 2, poll_seconds * IDLE_POLL_GROWTH)


def worker_lost(reason: str) -> ApiError:
    return ApiError(
        f"The worker running this response stopped before it finished ({reason}); "
        "the response was not completed.",
        status_code=500,
        error_type="server_error",
        code="worker_lost",
    )


class BackgroundWorkers:
    """``count`` workers and one sweeper (recovery, idempotency-key pruning, retention:
    ``background/retention.py``) in this process; ``count`` may be 0 (an API-only
    process still sweeps)."""

    def __init__(self, services: Runtime, count: int) -> None:
        self.services = services
        self.count = count
        self._stopping = False
        self._workers: list[asyncio.Task[None]] = []
        self._sweeper: asyncio.Task[None] | None = None
        # Jobs this process's workers are running: while one of them is idle, its own
        # looks at the queue keep the depth gauge current, and the sweep need not.
        self._running = 0

    def start(self) -> None:
        prefix = f"{socket.gethostname()}:{os.getpid()}"
        self._workers = [
            asyncio.create_task(self._work(f"{prefix}:{index}")) for index in range(self.count)
        ]
        self._sweeper = asyncio.create_task(self._sweep())

    async def stop(self, grace_seconds: float) -> None:
        """Lets running jobs finish for ``grace_seconds``; then stops them, and they are
        failed (``worker_lost``) right away rather than after their lease."""
        self._stopping = True
        self.services.background.wakeup.set()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.wait({self._sweeper})
        if not self._workers:
            return
        _done, pending = await asyncio.wait(self._workers, timeout=grace_seconds)
        if pending:
            for run in list(self.services.background.running.values()):
                run.cancel()
            _done, pending = await asyncio.wait(pending, timeout=5.0)
            for worker in pending:
                worker.cancel()

    async def _work(self, worker_id: str) -> None:
        wakeup = self.services.background.wakeup
        db = self.services.db
        poll = self.services.settings.background_poll_seconds
        wait = poll
        gate = LookGate()
        woken = True
        while not self._stopping:
            mark = db.change_mark()
            job = None
            if woken or not gate.may_skip(mark):
                try:
                    job = await self._claim(worker_id)
                except Exception as exc:
                    log_step_failure(log, "could not claim a background job", exc)
                    gate.forget()
                else:
                    gate.looked(mark) if job is None else gate.forget()
            if job is not None:
                self._running += 1
                try:
                    await run_job(self.services, job)
                except Exception as exc:
                    # Its lease runs out and the sweep recovers it.
                    log_step_failure(
                        log, "background job crashed", exc, response_id=job.response_id
                    )
                finally:
                    self._running -= 1
                wait, woken = poll, True
                continue
            try:
                await asyncio.wait_for(wakeup.wait(), wait)
                wait, woken = poll, True
            except TimeoutError:
                wait = next_idle_wait(wait, poll)
                woken = False
            if not self._stopping:
                wakeup.clear()

    async def _claim(self, worker_id: str) -> ClaimedJob | None:
        db = self.services.db
        async with db.read() as session:
            depth = await JobRepository(session).queued_count()
        BACKGROUND_QUEUE_DEPTH.set(depth)
        if depth == 0:
            return None
        now = utcnow()
        lease = timedelta(seconds=self.services.settings.lease_seconds)
        async with db.write() as session:
            return await JobRepository(session).claim_next(
                worker_id=worker_id, token=secrets.token_hex(16), now=now, lease_until=now + lease
            )

    async def _sweep(self) -> None:
        settings = self.services.settings
        db = self.services.db
        interval = max(settings.background_poll_seconds, min(settings.lease_seconds / 2, 5.0))
        pruned = float("-inf")
        retained = float("-inf")
        gate = LookGate()
        # When the first lease held now runs out: a job can expire with nobody committing.
        lease_end: datetime | None = None
        while not self._stopping:
            try:
                mark = db.change_mark()
                expiring = lease_end is not None and utcnow() >= lease_end
                if expiring or not gate.may_skip(mark):
                    # Also here, so the gauge stays current while every worker is busy (or
                    # there is none); an idle one reads it with each look at the queue.
                    if self._running >= self.count:
                        async with db.read() as session:
                            depth = await JobRepository(session).queued_count()
                        BACKGROUND_QUEUE_DEPTH.set(depth)
                    # (Only a database with a mark skips looks, so only it needs this.)
                    lease_end = await recover_expired(
                        self.services, with_lease_end=mark is not None
                    )
                    gate.looked(mark)
                if time.monotonic() - pruned >= PRUNE_EVERY_SECONDS:
                    retention = timedelta(seconds=settings.token_artifact_retention_seconds)
                    async with db.write() as session:
                        await IdempotencyRepository(session).prune(utcnow())
                        await TokenArtifactRepository(session).prune(utcnow() - retention)
                    pruned = time.monotonic()
                if (
                    settings.retention_days is not None
                    and time.monotonic() - retained >= settings.retention_interval_seconds
                ):
                    # Stamped first: a sweep that fails is retried at the next interval,
                    # not at every look.
                    retained = time.monotonic()
                    await prune_expired(self.services)
            except Exception as exc:
                gate.forget()
                log_step_failure(log, "background sweep failed", exc)
            await asyncio.sleep(interval)


async def run_job(services: Runtime, job: ClaimedJob) -> None:
    """Runs one claimed job to a terminal state (or until someone else ends it)."""
    db = services.db
    async with db.read() as session:
        responses = ResponseRepository(session)
        row = await responses.get_any(job.tenant_id, job.response_id)
        inputs = await responses.stored_input(job.response_id)
    if row is None:
        return
    # A job's turn has no request to run under: its trace starts here, with its time queued.
    with tracing.span("background turn", kind=SpanKind.CONSUMER):
        tracing.queue_wait(_nanoseconds(row.created_at))
        await _run_claimed(services, job, row, inputs)


def _nanoseconds(moment: datetime) -> int:
    # As storage/types.py:to_unix reads a stored time, to the nanosecond.
    return int(moment.timestamp() * 1_000_000_000)


async def _run_claimed(
    services: Runtime, job: ClaimedJob, row: Response, inputs: Sequence[StoredItem]
) -> None:
    db = services.db
    try:
        turn = await _prepare(services, row, inputs)
    except Exception as exc:
        # The request was valid when enqueued; what it relies on changed since (a parent
        # or conversation deleted, a history no longer verifiable).
        await fail_job(db, job.response_id, job.claim_token, None, _as_api_error(exc))
        return
    if not await _mark_started(services, job, turn):
        return
    events = JobEvents(
        db,
        job,
        lease_seconds=services.settings.lease_seconds,
        poll_seconds=services.settings.background_poll_seconds,
        on_lost=lambda: services.background.cancel_local(job.response_id),
    )
    hooks = CommitHooks(steps=(_ends_job(job),), event_log=events)
    events.start()
    run = asyncio.create_task(run_turn(services, turn, events, hooks=hooks))
    services.background.running[job.response_id] = run
    try:
        await asyncio.wait({run})
    finally:
        services.background.running.pop(job.response_id, None)
        run.cancel()
        await events.stop()
    failure = _failure_of(run)
    if failure is not None and not events.lost:
        # Whatever ended the run without its commit (an upstream refusal, a refused or
        # failed commit, a shutdown): fail the job, unless someone else ended it first.
        await fail_job(db, job.response_id, job.claim_token, turn.base, failure, events.leftover())


async def recover_expired(services: Runtime, *, with_lease_end: bool = False) -> datetime | None:
    """Applies the module's recovery rule to every job whose lease has expired. With
    ``with_lease_end``, returns when the first lease held as of its read runs out (None
    when none is held; always None without it)."""
    db = services.db
    now = utcnow()
    async with db.read() as session:
        jobs = JobRepository(session)
        expired = await jobs.expired(now)
        first_end = await jobs.earliest_lease_end() if with_lease_end else None
    for job in expired:
        if not job.started and job.attempts < MAX_ATTEMPTS:
            async with db.write() as session:
                await ResponseRepository(session).lock(job.response_id)
                requeued = await JobRepository(session).requeue_expired(
                    job.response_id, job.claim_token, now
                )
            if requeued:
                log.warning("requeued a job its worker left", response_id=job.response_id)
                BACKGROUND_RECOVERED.labels("requeued").inc()
                services.background.wakeup.set()
            continue
        reason = "its lease expired" if job.started else f"{job.attempts} claims never started it"
        if await fail_job(
            db, job.response_id, job.claim_token, None, worker_lost(reason), expired_only=True
        ):
            log.warning("failed a job its worker left", response_id=job.response_id)
            BACKGROUND_RECOVERED.labels("failed").inc()
    return first_end


async def _prepare(services: Runtime, row: Response, inputs: Sequence[StoredItem]) -> PreparedTurn:
    request = CreateResponseRequest.model_validate(row.request)
    caller = Caller(
        row.tenant_id,
        row.salt_epoch,
        mint_cache_salt(services.secret, row.tenant_id, row.salt_epoch),
    )
    reservation = Reservation(
        response_id=row.id,
        created_at=to_unix(row.created_at) or 0,
        new_input=[Item(i.item_id, i.type, i.data.encode()) for i in inputs],
    )
    return await prepare_turn(services, caller, request, reservation=reservation)


async def _mark_started(services: Runtime, job: ClaimedJob, turn: PreparedTurn) -> bool:
    """From here on the job counts as started (recovery fails it rather than rerun it)."""
    now = utcnow()
    lease_until = now + timedelta(seconds=services.settings.lease_seconds)
    async with services.db.write() as session:
        responses = ResponseRepository(session)
        await responses.lock(job.response_id)
        if not await JobRepository(session).mark_started(
            job.response_id, job.claim_token, now=now, lease_until=lease_until
        ):
            return False
        await responses.set_state(job.response_id, status="in_progress", body=turn.base)
    return True


def _ends_job(job: ClaimedJob) -> CommitStep:
    async def end(session: AsyncSession, row: Response) -> None:
        if not await JobRepository(session).finish(row.id, job.claim_token):
            raise Conflict(
                "The response was cancelled (or its worker presumed lost) before it could "
                "be stored.",
                code="background_job_lost",
            )

    return end


def _failure_of(run: asyncio.Task[Any]) -> ApiError | None:
    if run.cancelled():
        return worker_lost("the server shut down")
    exc = run.exception()
    if exc is None:
        return None
    if isinstance(exc, TurnFailed):
        return exc.error
    return _as_api_error(exc)


def _as_api_error(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    log.error("background job failed", exc_info=exc)
    return ApiError("The server had an error while running this response.", code="server_error")
