"""What tracing costs a turn in CPU when it is off (no ``OTEL_*`` set): the calls a plain
HTTP turn makes into ``agentic_api.tracing``, with their arguments built as the call sites
build them, timed in a loop against the same loop without them; then the same calls with
tracing on (spans to a processor that drops them, so only our side and the SDK count).

    .venv/bin/python scripts/bench/tracing_calls.py [--turns N] [--repeat R]

Prints the best of R runs (the least disturbed by the other processes of a shared
machine), in microseconds per turn. Not a test: figures go in docs/benchmarks/tracing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind

from agentic_api import tracing

MODEL = "sim-model"
HEADERS = {"authorization": "Bearer upstream-key", "x-session": "s"}
BODY = b'{"model":"sim-model","input":[{"role":"user","content":"hello"}]}'
FINAL: dict[str, Any] = {
    "id": "resp_0123456789abcdef",
    "model": MODEL,
    "status": "completed",
    "output": [{"type": "message", "role": "assistant", "content": []}],
    "usage": {
        "input_tokens": 922,
        "output_tokens": 8,
        "input_tokens_details": {"cached_tokens": 832},
    },
}
LOST = {"partial_block": 30}
SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/v1/responses",
    "headers": [(b"authorization", b"Bearer k"), (b"content-type", b"application/json")],
}


class _Drop(SpanProcessor):
    """Ends spans nowhere: the SDK's span work without an exporter's."""

    def on_end(self, span: ReadableSpan) -> None:
        return None


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    return None


def turn_calls() -> None:
    """The tracing calls of one plain turn (turns/run.py, prepare/turn.py, runner/round.py,
    runner/commit.py, runner/tokens.py), in order."""
    traced = tracing.current()
    tracing.record_request(traced, MODEL, None)
    tracing.record_turn(traced, session_id="sess_1")
    with tracing.span("rehydrate") as rehydrating:
        if rehydrating.is_recording():
            rehydrating.set_attribute("agentic.history.items", 3)
    with tracing.span("render"):
        pass
    with tracing.span(f"chat {MODEL}", kind=SpanKind.CLIENT) as round_:
        tracing.record_request(round_, MODEL, None)
        tracing.record_input(round_, BODY)
        tracing.with_traceparent(HEADERS)
        tracing.record_response(round_, FINAL)
    with tracing.span("commit", attributes={"agentic.commit.items": 2}):
        pass
    tracing.record_token_account(
        tracing.current(),
        status="exact",
        reusable=832,
        expected=832,
        measured=832,
        lost={cause: tokens for cause, tokens in LOST.items()},
    )
    tracing.record_response(traced, FINAL)


def nothing() -> None:
    return None


def per_call_us(work: Callable[[], None], turns: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(turns):
            work()
        best = min(best, (time.perf_counter_ns() - start) / turns / 1000)
    return best


def middleware_us(wrapped: Any, turns: int, repeat: int) -> float:
    """One ASGI call through ``wrapped`` (the server-span middleware or the bare app)."""

    async def loop() -> float:
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter_ns()
            for _ in range(turns):
                await wrapped(SCOPE, None, None)
            best = min(best, (time.perf_counter_ns() - start) / turns / 1000)
        return best

    return asyncio.run(loop())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    turns, repeat = args.turns, args.repeat
    print(f"python {platform.python_version()}, load average {os.getloadavg()}")
    tracing.uninstall()
    empty = per_call_us(nothing, turns, repeat)
    off = per_call_us(turn_calls, turns, repeat)
    bare = middleware_us(_app, turns, repeat)
    through = middleware_us(tracing.ServerSpans(_app), turns, repeat)
    print(f"tracing off: a turn's tracing calls {off - empty:.2f} us (loop {empty:.2f} us)")
    print(f"tracing off: the server-span middleware adds {through - bare:.2f} us per request")
    tracing.install(_Drop())
    on_turns = max(turns // 20, 1000)
    on = per_call_us(turn_calls, on_turns, repeat)
    on_through = middleware_us(tracing.ServerSpans(_app), on_turns, repeat)
    tracing.uninstall()
    print(f"tracing on (spans dropped, no export): a turn's calls {on - empty:.2f} us")
    print(f"tracing on: the server span (middleware) {on_through - bare:.2f} us per request")
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
