"""The background queue's order (``background_options``): completion windows and
continuation groups, on both databases, through the real claim statement."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentic_api.storage.database import Database
from agentic_api.storage.jobs import JobRepository
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.tenants import TenantRepository
from tests.storage.test_turn_store import sample_row

START = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


async def queue(db: Database, jobs: list[tuple[str, int, str | None]], tenant: str = "t") -> str:
    """Stores a response and a queued job for each (id, window rank, continuation id),
    queued one second apart in list order; returns the tenant id."""
    async with db.write() as session:
        tenant_id = (await TenantRepository(session).create(tenant)).id
        for index, (response_id, rank, group) in enumerate(jobs):
            await ResponseRepository(session).insert(sample_row(response_id, tenant_id), [])
            await JobRepository(session).enqueue(
                response_id,
                tenant_id,
                START + timedelta(seconds=index),
                window_rank=rank,
                continuation_id=group,
            )
    return tenant_id


async def claim(db: Database, worker: str) -> str | None:
    async with db.write() as session:
        claimed = await JobRepository(session).claim_next(
            worker_id=worker, token=f"tok-{worker}", now=START, lease_until=START
        )
    return claimed.response_id if claimed else None


async def finish(db: Database, response_id: str, worker: str) -> None:
    async with db.write() as session:
        assert await JobRepository(session).finish(response_id, f"tok-{worker}")


async def test_soonest_runs_ahead_of_2h_and_2h_ahead_of_8h(db: Database) -> None:
    await queue(db, [("resp_8h", 2, None), ("resp_2h", 1, None), ("resp_soon", 0, None)])
    order = [await claim(db, f"w{n}") for n in range(4)]
    assert order == ["resp_soon", "resp_2h", "resp_8h", None]


async def test_within_a_window_the_oldest_runs_first(db: Database) -> None:
    await queue(db, [("resp_a", 1, None), ("resp_b", 1, None), ("resp_c", 0, None)])
    assert [await claim(db, f"w{n}") for n in range(3)] == ["resp_c", "resp_a", "resp_b"]


async def test_a_continuation_group_runs_one_job_at_a_time_in_queue_order(db: Database) -> None:
    await queue(
        db,
        [("resp_g1", 0, "agent-7"), ("resp_g2", 0, "agent-7"), ("resp_other", 0, None)],
    )
    # The group's second job waits while its first runs; the ungrouped job does not.
    assert await claim(db, "w1") == "resp_g1"
    assert await claim(db, "w2") == "resp_other"
    assert await claim(db, "w3") is None
    await finish(db, "resp_g1", "w1")
    assert await claim(db, "w4") == "resp_g2"


async def test_a_group_keeps_its_queue_order_across_windows(db: Database) -> None:
    # The group's 8h job was queued first: its later soonest job waits for it, while
    # an ungrouped soonest job goes ahead.
    await queue(db, [("resp_slow", 2, "g"), ("resp_fast", 0, "g"), ("resp_free", 0, None)])
    assert await claim(db, "w1") == "resp_free"
    assert await claim(db, "w2") == "resp_slow"
    assert await claim(db, "w3") is None
    await finish(db, "resp_slow", "w2")
    assert await claim(db, "w4") == "resp_fast"


async def test_groups_are_per_tenant(db: Database) -> None:
    await queue(db, [("resp_t1", 0, "shared-name")], tenant="t1")
    await queue(db, [("resp_t2", 0, "shared-name")], tenant="t2")
    # Another tenant's job with the same continuation id is not in the same group.
    assert {await claim(db, "w1"), await claim(db, "w2")} == {"resp_t1", "resp_t2"}
