"""When a paused agent is expected back (``AGENTIC_KEEP_WARM_WHEN=before_return``): the
median of the session's own earlier pauses, from the turn that paused it to its next turn;
nothing before its first pause has ended, and other sessions' pauses do not count."""

from __future__ import annotations

from typing import Any

from agentic_api.cache.keep_warm import KeepWarm
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.wire.requests import CreateResponseRequest

REQUEST = CreateResponseRequest.model_validate({"model": "m", "input": "x"})
CALLED: dict[str, Any] = {
    "status": "completed",
    "output": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}],
    "usage": {"input_tokens": 100, "output_tokens": 5},
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pause(policy: KeepWarm, session: str, turn: int) -> None:
    policy.turn_finished(
        session_id=session,
        response_id=f"resp_{session}_{turn}",
        tenant_id="ten",
        salt_epoch=1,
        cache_salt="salt",
        request=REQUEST,
        final=CALLED,
    )


def expected(policy: KeepWarm, session: str) -> float | None:
    (paused,) = [p for p in policy._paused.values() if p.session_id == session]
    return paused.expected_return_at


def test_the_expected_return_is_the_median_of_the_sessions_own_pauses() -> None:
    clock = Clock()
    policy = KeepWarm(
        ResidencyTracker(["a"]),
        ttl_seconds=600,
        tokens_per_minute=10**9,
        tenant_tokens_per_minute=10**9,
        when="before_return",
        clock=clock,
    )
    pause(policy, "agent", 1)
    assert expected(policy, "agent") is None  # no pause of it has ended yet
    for turn, tool_seconds in enumerate((1.0, 10.0, 3.0), start=2):
        clock.now += tool_seconds
        policy.turn_started("agent")
        pause(policy, "agent", turn)
    # Pauses of 1, 10 and 3 s: back 3 s after pausing (the mean, 4.7 s, would be moved by
    # the one long tool call).
    assert expected(policy, "agent") == clock.now + 3.0
    pause(policy, "other", 1)
    assert expected(policy, "other") is None
