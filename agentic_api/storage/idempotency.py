"""Queries over ``idempotency_keys``: claim, renew, complete, release, prune.

A claim is a row in state ``in_progress`` owned by a token; completing or releasing it
names that token, so a request whose claim was taken over (after its lease expired)
cannot overwrite the new owner's outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import IdempotencyKey

IN_PROGRESS = "in_progress"
COMPLETED = "completed"


@dataclass(frozen=True)
class KeyRef:
    tenant_id: str
    endpoint: str
    key: str


@dataclass(frozen=True)
class Outcome:
    """What a completed request produced: a JSON answer, or a response's event stream."""

    kind: str
    status_code: int
    body: dict[str, Any] | None
    response_id: str | None


@dataclass(frozen=True)
class NewClaim:
    request_hash: str
    token: str
    now: datetime
    lease_until: datetime
    expires_at: datetime


class IdempotencyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def insert_claim(self, ref: KeyRef, claim: NewClaim) -> bool:
        """Claims an unused key; False when a row exists already.

        ``ON CONFLICT DO NOTHING`` rather than read-then-insert: on PostgreSQL a second
        request with the same key waits here for the first one's transaction, then sees
        its row (instead of failing on the primary key).
        """
        dialect = self.session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        result = await self.session.execute(
            insert(IdempotencyKey)
            .values(
                tenant_id=ref.tenant_id,
                endpoint=ref.endpoint,
                key=ref.key,
                request_hash=claim.request_hash,
                status=IN_PROGRESS,
                owner_token=claim.token,
                lease_expires_at=claim.lease_until,
                created_at=claim.now,
                expires_at=claim.expires_at,
            )
            .on_conflict_do_nothing(index_elements=["tenant_id", "endpoint", "key"])
            .returning(IdempotencyKey.key)
        )
        return result.first() is not None

    async def locked(self, ref: KeyRef) -> IdempotencyKey | None:
        """The key's row, locked for this transaction (SQLite: under its write lock)."""
        query = (
            select(IdempotencyKey)
            .where(*_matches(ref))
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def reclaim(self, ref: KeyRef, claim: NewClaim) -> None:
        """Turns a locked row that no longer counts (expired, or a dead claim) into a
        fresh claim."""
        await self.session.execute(
            update(IdempotencyKey)
            .where(*_matches(ref))
            .values(
                request_hash=claim.request_hash,
                status=IN_PROGRESS,
                owner_token=claim.token,
                lease_expires_at=claim.lease_until,
                created_at=claim.now,
                expires_at=claim.expires_at,
                result_kind=None,
                response_id=None,
                status_code=None,
                body=None,
            )
        )

    async def renew(self, ref: KeyRef, token: str, lease_until: datetime) -> bool:
        result = await self.session.execute(
            update(IdempotencyKey)
            .where(*_matches(ref), *_held_by(token))
            .values(lease_expires_at=lease_until)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def complete(self, ref: KeyRef, token: str, outcome: Outcome) -> bool:
        result = await self.session.execute(
            update(IdempotencyKey)
            .where(*_matches(ref), *_held_by(token))
            .values(
                status=COMPLETED,
                owner_token=None,
                lease_expires_at=None,
                result_kind=outcome.kind,
                response_id=outcome.response_id,
                status_code=outcome.status_code,
                body=outcome.body,
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def release(self, ref: KeyRef, token: str) -> bool:
        """Forgets a claim that produced nothing (a completed key is left alone)."""
        result = await self.session.execute(
            delete(IdempotencyKey).where(*_matches(ref), *_held_by(token))
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def prune(self, now: datetime) -> int:
        """Deletes expired keys, except claims whose request is still running."""
        result = await self.session.execute(
            delete(IdempotencyKey).where(
                IdempotencyKey.expires_at < now,
                or_(
                    IdempotencyKey.status == COMPLETED,
                    IdempotencyKey.lease_expires_at.is_(None),
                    IdempotencyKey.lease_expires_at < now,
                ),
            )
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _matches(ref: KeyRef) -> tuple[Any, ...]:
    return (
        IdempotencyKey.tenant_id == ref.tenant_id,
        IdempotencyKey.endpoint == ref.endpoint,
        IdempotencyKey.key == ref.key,
    )


def _held_by(token: str) -> tuple[Any, ...]:
    return (and_(IdempotencyKey.status == IN_PROGRESS, IdempotencyKey.owner_token == token),)
