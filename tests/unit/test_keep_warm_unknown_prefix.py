"""Keep-warm when a paused prefix's residency is unknown (blocks stored before this
process listened, none grafted back: issue 38, item 16): the prefix cannot be seen to
drop, so the session's evictions since the pause decide, as without token ids; a prefix
that is known and never held is still never re-warmed."""

from __future__ import annotations

from array import array

from agentic_api.cache.keep_warm import KeepWarm, Pause
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.wire.requests import CreateResponseRequest
from tests.unit.test_residency_tree import REPLICA, SALT, Replica, run
from tests.upstream_sim.kv_events import removed

REQUEST = CreateResponseRequest.model_validate({"model": "m", "input": "x"})


def paused(seq: int) -> tuple[KeepWarm, Replica, Pause]:
    target = ResidencyTracker([REPLICA], clock=lambda: 100.0)
    replica = Replica(target)
    replica.seq = seq
    policy = KeepWarm(
        target,
        ttl_seconds=600,
        tokens_per_minute=10**9,
        tenant_tokens_per_minute=10**9,
        clock=lambda: 100.0,
    )
    pause = Pause(
        session_id="s",
        response_id="resp_s",
        tenant_id="ten",
        salt_epoch=1,
        cache_salt=SALT,
        request=REQUEST,
        paused_at=100.0,
        input_tokens=16,
        output_tokens=4,
    )
    policy._paused["s"] = pause
    return policy, replica, pause


def tokens(_pause: Pause) -> array[int]:
    return array("I", run(1, 2, 3, 4, 5))


def test_an_unknown_prefix_is_rewarmed_when_the_sessions_blocks_go() -> None:
    policy, replica, _pause = paused(seq=57)
    # The session's own block 5 hangs under block 4, never reported here (no evidence).
    replica.store([5], 4)
    assert list(policy.due(tokens)) == []
    replica.send(removed(5))
    (due,) = policy.due(tokens)
    assert due.replica == REPLICA and due.resident is None


def test_a_known_prefix_never_held_is_not_rewarmed() -> None:
    policy, replica, _pause = paused(seq=0)
    replica.store([5], 4)
    replica.send(removed(5))
    assert list(policy.due(tokens)) == []
