"""The console's lost-tokens series over real SQLite and PostgreSQL: each cause's tokens,
bucketed by time, sum to what the turns' accounts recorded."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from agentic_api.operator.handlers.console.tenants import LOST_CAUSES
from agentic_api.operator.queries.console import ConsoleRepository, LostBucket
from agentic_api.storage.database import Database
from tests.support.console_seed import seed_conversations
from tests.support.tenants import create_tenant


@pytest.mark.parametrize("buckets", [60, 86_400])
def test_lost_series_sums_each_cause(fresh_db: str, buckets: int) -> None:
    tenant = create_tenant(fresh_db, "series")
    other = create_tenant(fresh_db, "other")
    # Turns 1-3 of each conversation lose 7 partial-block tokens; turn 3 also 64 that
    # were evicted (tests/support/console_seed.py); the root turn loses nothing.
    seed_conversations(fresh_db, tenant.id, 30, turns_each=4)
    seed_conversations(fresh_db, other.id, 5, turns_each=4)

    async def read() -> list[LostBucket]:
        db = Database.from_url(fresh_db, pool_size=1)
        try:
            async with db.read() as session:
                return await ConsoleRepository(session).lost_series(
                    tenant.id, datetime.now(UTC) - timedelta(days=1), buckets, LOST_CAUSES
                )
        finally:
            await db.close()

    series = asyncio.run(read())
    totals: dict[str, int] = {}
    for bucket in series:
        assert bucket.start % buckets == 0
        totals[bucket.cause] = totals.get(bucket.cause, 0) + bucket.tokens
    assert totals == {"partial_block": 30 * 3 * 7, "not_resident": 30 * 64}
