"""Idempotency-Key: a retried request gets the first one's outcome, never a second run.

Rules (per tenant and endpoint; the key's request hash is the SHA-256 of the canonical
JSON of what was asked):

- unknown (or expired) key: this request claims it and runs;
- same key, different request: 422 ``idempotency_key_reused``;
- same key, completed: the stored outcome, and nothing runs;
- same key, claimed by a request still running: 409 ``idempotency_key_in_progress``;
- a claim whose lease ran out (its process died) is taken over by the next request.

A claim ends in one of three ways. The request stores something: the outcome is
recorded by a commit step, in the same transaction as what it stored. The model ran but
its commit was refused (a lost conversation race): the refusal is recorded as the
outcome, so a retry answers it instead of running the model again. Or it stores nothing
before the model ran (bad input, an upstream refusal): the claim is released, so a retry
runs. A running claim is renewed every third of its lease.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.errors import ApiError, Conflict, InvalidRequest, Unprocessable
from agentic_api.log import get_logger
from agentic_api.storage.database import Database
from agentic_api.storage.idempotency import (
    COMPLETED,
    IdempotencyRepository,
    KeyRef,
    NewClaim,
    Outcome,
)
from agentic_api.storage.models import Response
from agentic_api.storage.types import utcnow
from agentic_api.turns.data.commit_steps import CommitStep
from lineage import canonical_json, sha256_hex

log = get_logger("agentic_api.idempotency")

T = TypeVar("T")

RESPONSES = "responses"
CONVERSATION_ITEMS = "conversation_items"
# Mid-stream failures are stored; their HTTP status is derived from the stored code when
# the outcome is recorded (they are all upstream failures: timeouts 504, the rest 502).
_FAILURE_STATUS = {"upstream_timeout": 504, "commit_failed": 500}


def request_hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))


def json_outcome(final: dict[str, Any], reason: dict[str, Any] | None = None) -> Outcome:
    """What a non-streaming create answered: the Response object, or for a stored
    failure the same error the route raised (``reason``: the row's own error, whose code
    says more than the Response object's may)."""
    if final.get("status") != "failed":
        return Outcome("json", 200, final, final.get("id"))
    error = turn_failed_error(final, reason)
    return Outcome("json", error.status_code, error.body(), final.get("id"))


def turn_failed_error(final: dict[str, Any], reason: dict[str, Any] | None = None) -> ApiError:
    stored = final.get("error") or {}
    code = (reason or stored).get("code")
    return ApiError(
        f"Response '{final.get('id')}' failed: {stored.get('message')}",
        status_code=_FAILURE_STATUS.get(str(code), 502),
        error_type="server_error",
        code=code,
    )


def stream_outcome(response_id: str) -> Outcome:
    return Outcome("stream", 200, None, response_id)


class Claim:
    """This request's hold on a key, until its outcome is recorded or it is released."""

    def __init__(self, db: Database, ref: KeyRef, token: str, lease_seconds: float) -> None:
        self.db = db
        self.ref = ref
        self.token = token
        self.lease_seconds = lease_seconds

    async def complete_in(self, session: AsyncSession, outcome: Outcome) -> None:
        """Records the outcome in the caller's transaction; raises (rolling it back) if
        this claim was taken over meanwhile, so one key never gets two outcomes."""
        if not await IdempotencyRepository(session).complete(self.ref, self.token, outcome):
            raise Conflict(
                f"Idempotency-Key '{self.ref.key}' was taken over by another request while "
                "this one ran (its claim had expired); this response was not stored.",
                code="idempotency_key_in_progress",
            )

    def records(self, kind: str) -> CommitStep:
        """A commit step recording the turn's outcome (``json`` or ``stream``)."""

        async def record(session: AsyncSession, row: Response) -> None:
            if kind == "stream":
                outcome = stream_outcome(row.id)
            else:
                outcome = json_outcome(row.body, row.error)
            await self.complete_in(session, outcome)

        return record

    async def hold(self, work: Awaitable[T]) -> T:
        """Awaits ``work`` with the claim renewed, then releases it unless completed."""
        beat = asyncio.create_task(self._renew_until_cancelled())
        try:
            return await work
        except ApiError as refused:
            if refused.after_model:
                await self._record_refusal(refused)
            raise
        finally:
            beat.cancel()
            await asyncio.wait({beat})
            await self.release()

    async def _record_refusal(self, refused: ApiError) -> None:
        try:
            async with self.db.write() as session:
                outcome = Outcome("json", refused.status_code, refused.body(), None)
                await self.complete_in(session, outcome)
        except Exception:
            # Taken over meanwhile, or the database failed: the key is released instead.
            log.exception("could not record a refusal", endpoint=self.ref.endpoint)

    async def release(self) -> None:
        try:
            async with self.db.write() as session:
                await IdempotencyRepository(session).release(self.ref, self.token)
        except Exception:
            # The lease runs out on its own; a retry then takes the key over.
            log.exception("could not release an idempotency key", endpoint=self.ref.endpoint)

    async def _renew_until_cancelled(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                async with self.db.write() as session:
                    renewed = await IdempotencyRepository(session).renew(
                        self.ref, self.token, utcnow() + timedelta(seconds=self.lease_seconds)
                    )
            except Exception:
                log.exception("could not renew an idempotency key", endpoint=self.ref.endpoint)
                continue
            if not renewed:
                return


async def claim_in(
    session: AsyncSession,
    db: Database,
    ref: KeyRef,
    fingerprint: str,
    *,
    ttl_seconds: float,
    lease_seconds: float,
) -> Claim | Outcome:
    """Claims ``ref`` in the caller's transaction, or returns its stored outcome.

    Raises 422 for a different request under the same key and 409 while another request
    holds it. Used alone (see ``claim``) when the work runs in later transactions, or
    inside the work's own transaction when it has just one (then a failure rolls the
    claim back with it).
    """
    repo = IdempotencyRepository(session)
    now = utcnow()
    fresh = NewClaim(
        request_hash=fingerprint,
        token=secrets.token_hex(16),
        now=now,
        lease_until=now + timedelta(seconds=lease_seconds),
        expires_at=now + timedelta(seconds=ttl_seconds),
    )
    claim = Claim(db, ref, fresh.token, lease_seconds)
    if await repo.insert_claim(ref, fresh):
        return claim
    row = await repo.locked(ref)
    if row is None:
        # Pruned between the two statements: the key is unused again.
        if await repo.insert_claim(ref, fresh):
            return claim
        raise _in_progress(ref)
    if row.expires_at <= now:
        await repo.reclaim(ref, fresh)
        return claim
    if row.request_hash != fingerprint:
        raise Unprocessable(
            f"Idempotency-Key '{ref.key}' was already used with a different request; "
            "use a new key for a new request.",
            code="idempotency_key_reused",
        )
    if row.status == COMPLETED:
        return Outcome(row.result_kind or "json", row.status_code or 200, row.body, row.response_id)
    if row.lease_expires_at is not None and row.lease_expires_at > now:
        raise _in_progress(ref)
    log.warning("taking over an expired idempotency claim", endpoint=ref.endpoint)
    await repo.reclaim(ref, fresh)
    return claim


async def claim(
    db: Database, ref: KeyRef, fingerprint: str, *, ttl_seconds: float, lease_seconds: float
) -> Claim | Outcome:
    """Claims ``ref`` in a transaction of its own (committed before the work starts)."""
    async with db.write() as session:
        return await claim_in(
            session, db, ref, fingerprint, ttl_seconds=ttl_seconds, lease_seconds=lease_seconds
        )


def requires_store() -> ApiError:
    return InvalidRequest(
        "Idempotency-Key needs 'store': true: a response that is not stored could not be "
        "returned to a retry.",
        param="store",
        code="idempotency_key_requires_store",
    )


def _in_progress(ref: KeyRef) -> ApiError:
    return Conflict(
        f"A request with Idempotency-Key '{ref.key}' is still in progress; retry when it "
        "has finished.",
        code="idempotency_key_in_progress",
    )
