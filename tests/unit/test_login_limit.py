"""The console's failed-login counter on its own: the window slides, Retry-After is when
enough of the oldest failures have left it, and what it remembers is bounded."""

from __future__ import annotations

from agentic_api.operator.http.console import login_limit
from agentic_api.operator.http.console.login_limit import LoginLimiter


def test_the_limit_lifts_as_the_oldest_failures_leave_the_window() -> None:
    limiter = LoginLimiter(max_failures=3, window_seconds=60)
    for moment in (0.0, 10.0, 20.0):
        assert limiter.retry_after("a", f"p{moment}", moment) is None
        limiter.failed("a", f"p{moment}", moment)
    # Three in the window: wait until the first leaves it (at 60).
    assert limiter.retry_after("a", "other", 30.0) == 30
    assert limiter.retry_after("a", "other", 59.5) == 1
    assert limiter.retry_after("a", "other", 60.0) is None
    # Another address is not held up by it.
    assert limiter.retry_after("b", "other", 30.0) is None


def test_a_prefix_is_limited_across_addresses_and_success_clears_an_address() -> None:
    limiter = LoginLimiter(max_failures=2, window_seconds=60)
    limiter.failed("a", "sk-agentic-admin-abcdef", 0.0)
    limiter.failed("b", "sk-agentic-admin-abcdef", 1.0)
    assert limiter.retry_after("c", "sk-agentic-admin-abcdef", 2.0) == 58
    limiter.failed("d", "x", 0.0)
    limiter.failed("d", "y", 0.0)
    assert limiter.retry_after("d", "z", 1.0) == 59
    limiter.succeeded("d")
    assert limiter.retry_after("d", "z", 1.0) is None


def test_what_it_remembers_is_bounded() -> None:
    limiter = LoginLimiter(max_failures=1, window_seconds=60)
    for index in range(login_limit.MAX_TRACKED):
        limiter.failed(f"addr-{index}", f"prefix-{index}", 0.0)
    assert len(limiter._failures) == login_limit.MAX_TRACKED
    # The least recently seen were forgotten first: the oldest address is free again.
    assert limiter.retry_after("addr-0", "new", 1.0) is None
    assert limiter.retry_after(f"addr-{login_limit.MAX_TRACKED - 1}", "new", 1.0) == 59
