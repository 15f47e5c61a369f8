"""The memo of resolved API keys looks a key up once however many requests ask for it at
the same time, memoizes only what it found, and after ``clear`` (a tenant changed) never
answers from a lookup made before it."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from agentic_api.serving import tenants
from agentic_api.serving.tenants import KeyMemo, TenantContext

TENANT = TenantContext("ten_1", "one", 0, "salt")
ROTATED = TenantContext("ten_1", "one", 1, "salt-1")


class SlowLookup:
    """A database read that takes until the test releases it."""

    def __init__(self, *answers: TenantContext | None) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.release = asyncio.Event()

    async def __call__(self) -> TenantContext | None:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        await self.release.wait()
        return answer


async def test_requests_asking_at_once_share_one_lookup_and_its_answer_is_memoized() -> None:
    memo = KeyMemo()
    lookup = SlowLookup(TENANT)
    waiting = [asyncio.ensure_future(memo.resolve("hash", lookup)) for _ in range(20)]
    await asyncio.sleep(0)
    lookup.release.set()
    assert await asyncio.gather(*waiting) == [TENANT] * 20
    assert lookup.calls == 1
    assert await memo.resolve("hash", lookup) == TENANT
    assert lookup.calls == 1


async def test_an_unknown_key_is_not_memoized() -> None:
    memo = KeyMemo()
    lookup = SlowLookup(None, TENANT)
    lookup.release.set()
    answers = await asyncio.gather(memo.resolve("hash", lookup), memo.resolve("hash", lookup))
    assert list(answers) == [None, None]
    assert lookup.calls == 1
    # (A key created since is found at once, not a memo window later.)
    assert await memo.resolve("hash", lookup) == TENANT
    assert lookup.calls == 2


async def test_a_failed_lookup_fails_everyone_waiting_and_the_next_request_looks_again() -> None:
    memo = KeyMemo()
    calls = 0

    async def failing() -> TenantContext | None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        raise RuntimeError("database unavailable")

    results = await asyncio.gather(
        memo.resolve("hash", failing), memo.resolve("hash", failing), return_exceptions=True
    )
    assert [str(result) for result in results] == ["database unavailable"] * 2
    assert calls == 1
    with pytest.raises(RuntimeError):
        await memo.resolve("hash", failing)
    assert calls == 2


async def test_after_a_clear_no_answer_read_before_it_is_given_or_kept() -> None:
    memo = KeyMemo()
    lookup = SlowLookup(TENANT, ROTATED)
    before = asyncio.ensure_future(memo.resolve("hash", lookup))
    await asyncio.sleep(0)
    memo.clear()  # the tenant's salt was rotated while its key was being read
    after = asyncio.ensure_future(memo.resolve("hash", lookup))
    await asyncio.sleep(0)
    lookup.release.set()
    assert await before == TENANT
    assert await after == ROTATED
    assert lookup.calls == 2
    assert await memo.resolve("hash", lookup) == ROTATED
    assert lookup.calls == 2


async def test_a_waiter_that_is_cancelled_does_not_cancel_the_lookup_for_the_others() -> None:
    memo = KeyMemo()
    lookup = SlowLookup(TENANT)
    leaving = asyncio.ensure_future(memo.resolve("hash", lookup))
    staying = asyncio.ensure_future(memo.resolve("hash", lookup))
    await asyncio.sleep(0)
    leaving.cancel()
    await asyncio.sleep(0)
    lookup.release.set()
    assert await staying == TENANT
    assert leaving.cancelled()


class Answers:
    """A database read answering each call with the next of ``answers`` at once."""

    def __init__(self, *answers: TenantContext | Exception | None) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def __call__(self) -> TenantContext | None:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        await asyncio.sleep(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def test_a_key_used_near_the_end_of_its_entry_is_answered_at_once_and_looked_up_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(tenants, "time", clock)
    memo = KeyMemo(seconds=5, refresh_ahead_seconds=1)
    lookup = Answers(TENANT, ROTATED)
    assert await memo.resolve("hash", lookup) == TENANT
    clock.now += 3.9
    assert await memo.resolve("hash", lookup) == TENANT
    await settle()
    assert lookup.calls == 1  # (not yet near the end)
    clock.now += 0.2
    # Near the end: the memo answers without waiting, and a lookup starts beside it.
    assert await memo.resolve("hash", lookup) == TENANT
    await settle()
    assert lookup.calls == 2
    assert await memo.resolve("hash", lookup) == ROTATED
    # The refreshed entry has a whole window again: past the old end, no wait.
    clock.now += 3
    assert memo.get("hash") == ROTATED
    # And it ends in its own time.
    clock.now += 2.1
    assert memo.get("hash") is None


async def test_a_refresh_that_finds_the_key_revoked_drops_it_at_once() -> None:
    memo = KeyMemo(seconds=10, refresh_ahead_seconds=10)
    lookup = Answers(TENANT, None, None)
    assert await memo.resolve("hash", lookup) == TENANT
    # (Within the refresh window from the start.)
    assert await memo.resolve("hash", lookup) == TENANT
    await settle()
    assert memo.get("hash") is None
    assert await memo.resolve("hash", lookup) is None


async def test_a_failed_refresh_is_logged_and_the_entry_serves_until_its_end() -> None:
    memo = KeyMemo(seconds=10, refresh_ahead_seconds=10)
    lookup = Answers(TENANT, RuntimeError("database unavailable"))
    with structlog.testing.capture_logs() as logged:
        assert await memo.resolve("hash", lookup) == TENANT
        assert await memo.resolve("hash", lookup) == TENANT
        await settle()
    assert lookup.calls == 2
    assert memo.get("hash") == TENANT
    assert [(entry["event"], entry["error"]) for entry in logged] == [
        ("api key refresh failed", "RuntimeError")
    ]
