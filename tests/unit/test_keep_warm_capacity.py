"""The keep-warm capacity bound: on a replica holding more paused sessions than its KV
cache fits, only those paused earliest (expected back first) whose prompts and outputs
fit the cache's share are re-warmed; sessions on other replicas take none of its room, and
a prefix the sessions share (blocks in the same place of the chain) is counted once."""

from __future__ import annotations

from collections.abc import Sequence

from agentic_api.cache.keep_warm import Due, KeepWarm, Pause
from agentic_api.cache.residency.events import Batch, BlocksStored
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


BLOCK = 32
# The benchmark's shape: an 864-token shared prefix (27 blocks) and each session's own
# 320 tokens (10 blocks), plus a partial block vLLM does not cache.
SHARED = list(range(864))


def session_tokens(own_start: int) -> list[int]:
    return SHARED + list(range(own_start, own_start + 320 + 7))


def test_a_shared_prefix_is_counted_once() -> None:
    policy, pauses = policy_with(
        ("first", 10.0, 1191, "a"), ("second", 20.0, 1191, "a"), ("third", 30.0, 1191, "a")
    )
    # The replica's block size, as its KV events give it.
    policy.residency.apply("a", Batch(0, 0.0, (BlocksStored((1,), BLOCK, None, None),)), 0.0)
    tokens = {
        "first": session_tokens(10_000),
        "second": session_tokens(20_000),
        "third": session_tokens(30_000),
    }

    def tokens_of(pause: Pause) -> Sequence[int] | None:
        return tokens[pause.session_id]

    # 864 shared + 3 x 320 own = 1,824 tokens in full blocks: fits 2,048 (2,560 x 0.8);
    # each session's whole prompt + output added up (3 x 1,191 = 3,573) would not.
    assert policy.fits(due(pauses["third"], "a"), 2560, 0.8, tokens_of)
    assert not policy.fits(due(pauses["third"], "a"), 2560, 0.8)
    # Its own blocks still count: 1,824 does not fit 1,800.
    assert not policy.fits(due(pauses["third"], "a"), 1800, 1.0, tokens_of)
    assert policy.fits(due(pauses["second"], "a"), 1800, 1.0, tokens_of)


def test_the_same_tokens_under_another_salt_are_other_blocks() -> None:
    policy, pauses = policy_with(("first", 10.0, 1191, "a"), ("second", 20.0, 1191, "a"))
    pauses["second"].cache_salt = "another tenant"
    policy.residency.apply("a", Batch(0, 0.0, (BlocksStored((1,), BLOCK, None, None),)), 0.0)

    def tokens_of(pause: Pause) -> Sequence[int] | None:
        return session_tokens(10_000)

    # Same tokens, two salts: vLLM shares nothing, so 2 x 1,184 must fit.
    assert not policy.fits(due(pauses["second"], "a"), 2000, 1.0, tokens_of)
    assert policy.fits(due(pauses["second"], "a"), 2400, 1.0, tokens_of)
