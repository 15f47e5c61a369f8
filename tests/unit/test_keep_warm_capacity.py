"""The keep-warm capacity bound: on a replica holding more paused sessions than its KV
cache fits, only those paused earliest (expected back first) whose prompts and outputs
fit the cache's share are re-warmed; sessions on other replicas take none of its room."""

from __future__ import annotations

from agentic_api.cache.keep_warm import Due, KeepWarm, Pause
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.wire.requests import CreateResponseRequest

REQUEST = CreateResponseRequest.model_validate({"model": "m", "input": "x"})


def policy_with(*pauses: tuple[str, float, int, str]) -> tuple[KeepWarm, dict[str, Pause]]:
    """Pauses as (session, paused at, prompt + output tokens, replica last seen on)."""
    policy = KeepWarm(
        ResidencyTracker(["a", "b"]),
        ttl_seconds=600,
        tokens_per_minute=10**9,
        tenant_tokens_per_minute=10**9,
    )
    made = {}
    for session, at, tokens, replica in pauses:
        pause = Pause(
            session_id=session,
            response_id=f"resp_{session}",
            tenant_id="ten",
            salt_epoch=1,
            cache_salt="salt",
            request=REQUEST,
            paused_at=at,
            input_tokens=tokens - 10,
            output_tokens=10,
            peak=tokens,
            peak_replica=replica,
        )
        policy._paused[session] = pause
        made[session] = pause
    return policy, made


def due(pause: Pause, replica: str) -> Due:
    return Due(pause, replica, 0, pause.input_tokens + pause.output_tokens, "evicted")


def test_only_the_earliest_paused_sessions_that_fit_are_rewarmed() -> None:
    # A 2,560-token cache at share 0.8 holds 2,048 tokens: two sessions of 1,000.
    policy, pauses = policy_with(
        ("late", 30.0, 1000, "a"), ("first", 10.0, 1000, "a"), ("second", 20.0, 1000, "a")
    )
    assert policy.fits(due(pauses["first"], "a"), 2560, 0.8)
    assert policy.fits(due(pauses["second"], "a"), 2560, 0.8)
    assert not policy.fits(due(pauses["late"], "a"), 2560, 0.8)
    # The whole cache holds all three.
    assert policy.fits(due(pauses["late"], "a"), 3000, 1.0)


def test_sessions_on_another_replica_take_none_of_its_room() -> None:
    policy, pauses = policy_with(
        ("elsewhere", 10.0, 2000, "b"), ("here", 20.0, 1000, "a"), ("unseen", 5.0, 2000, "b")
    )
    assert policy.fits(due(pauses["here"], "a"), 1200, 1.0)
    # One bigger than the cache alone never fits.
    assert not policy.fits(due(pauses["elsewhere"], "b"), 1500, 1.0)


def test_a_rewarm_counts_where_it_was_sent_until_seen_again() -> None:
    policy, pauses = policy_with(("warmed", 10.0, 1500, "a"), ("next", 20.0, 1000, "a"))
    pauses["warmed"].peak_replica = None  # re-warmed: not seen since
    rewarm = policy.started(due(pauses["warmed"], "a"), None, pressure_checked=True)
    assert rewarm.replica == "a"
    assert not policy.fits(due(pauses["next"], "a"), 2000, 1.0)
    assert policy.fits(due(pauses["next"], "a"), 2500, 1.0)
