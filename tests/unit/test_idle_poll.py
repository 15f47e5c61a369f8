"""An idle background worker polls less and less often (each empty poll doubles the wait,
up to a bound), and a found job or a wake-up brings it back to the configured poll; with
a change mark (SQLite) a poll skips its look while the mark stands where it stood before
the last empty look, for at most a minute (the loop in background/worker.py)."""

from __future__ import annotations

import time

import pytest

from agentic_api.background import look_gate
from agentic_api.background.look_gate import LookGate
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


def test_a_look_is_skipped_only_while_the_mark_stands() -> None:
    gate = LookGate()
    assert not gate.may_skip((1, 7))  # never looked yet
    gate.looked((1, 7))
    assert gate.may_skip((1, 7))
    assert not gate.may_skip((1, 8))  # someone committed
    gate.looked((1, 8))
    assert gate.may_skip((1, 8))
    gate.forget()  # the look found a job (or failed)
    assert not gate.may_skip((1, 8))


def test_no_mark_is_never_skipped() -> None:
    gate = LookGate()
    gate.looked(None)
    assert not gate.may_skip(None)


def test_a_standing_mark_still_gets_a_look_once_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    gate = LookGate()
    gate.looked((1, 3))
    now[0] += look_gate.LOOK_AT_LEAST_EVERY_SECONDS - 1
    assert gate.may_skip((1, 3))
    now[0] += 1
    assert not gate.may_skip((1, 3))
