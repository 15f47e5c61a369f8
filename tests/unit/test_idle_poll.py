"""An idle background worker looks at the queue less and less often (each empty look
doubles the wait, up to a bound), and a found job or a wake-up brings it back to the
configured poll (the loop in background/worker.py)."""

from __future__ import annotations

from agentic_api.background.worker import IDLE_POLL_GROWTH, next_idle_wait


def test_each_empty_look_doubles_the_wait_up_to_the_bound() -> None:
    waits = [0.5]
    for _ in range(6):
        waits.append(next_idle_wait(waits[-1], 0.5))
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert max(waits) == 0.5 * IDLE_POLL_GROWTH


def test_the_bound_follows_the_configured_poll() -> None:
    assert next_idle_wait(1.0, 0.1) == 0.1 * IDLE_POLL_GROWTH
    assert next_idle_wait(0.1, 0.1) == 0.2
