"""CPU per event of handing a streamed turn's events to its SSE response, in process.

    PYTHONPATH=TREE .venv/bin/python scripts/bench/stream_handoff.py channel|direct

``channel``: the turn publishes each event to its ``TurnChannel`` and yields (as it does
while it waits for the upstream's next event); the SSE response of TREE (``http/sse.py``:
``TurnEventStream``, or Starlette's ``StreamingResponse`` over ``from_turn`` in trees
before it) takes it and calls a ``send`` that only counts. ``direct``: the turn frames
each event and awaits ``send`` itself, the same yield, no channel and no reader task, the
ceiling of a one-task stream. uvloop; CPU from ``time.process_time``; best of 5 runs of
40,000 events. Used by docs/benchmarks/streaming/README.md.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

import agentic_api.http.sse as sse
from agentic_api.turns.runner.channel import TurnChannel
from agentic_api.upstream.sse import frame_sse

EVENTS = 40_000
EVENT = {
    "type": "response.output_text.delta",
    "sequence_number": 1,
    "item_id": "msg_1",
    "output_index": 0,
    "content_index": 0,
    "delta": " hi",
    "logprobs": [],
}


class FakeStream:
    """What the SSE response reads of a ``TurnStream``: its channel and its ``with``."""

    def __init__(self) -> None:
        self.channel = TurnChannel()

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


async def through_channel() -> float:
    stream = FakeStream()
    sent = 0

    async def send(message: Any) -> None:
        nonlocal sent
        sent += 1

    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def receive() -> Any:
        await never

    made = getattr(sse, "TurnEventStream", None)
    response = made(stream) if made is not None else sse.sse_response(sse.from_turn(stream))  # type: ignore[attr-defined]
    scope = {"type": "http", "asgi": {"spec_version": "2.3"}}
    data = orjson.dumps(EVENT)

    async def turn() -> None:
        for _ in range(EVENTS):
            stream.channel.publish(EVENT, data)
            await asyncio.sleep(0)
        stream.channel.close()

    start = time.process_time()
    await asyncio.gather(response(scope, receive, send), turn())
    elapsed = time.process_time() - start
    never.cancel()
    assert sent >= EVENTS, sent
    return elapsed / EVENTS * 1e6


async def direct() -> float:
    sent = 0

    async def send(message: Any) -> None:
        nonlocal sent
        sent += 1

    data = orjson.dumps(EVENT)
    start = time.process_time()
    for _ in range(EVENTS):
        body = frame_sse(str(EVENT["type"]), data)
        await send({"type": "http.response.body", "body": body, "more_body": True})
        await asyncio.sleep(0)
    return (time.process_time() - start) / EVENTS * 1e6


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "channel"
    run = {"channel": through_channel, "direct": direct}[mode]
    best = min(uvloop.run(run()) for _ in range(5))
    load = Path("/proc/loadavg").read_text()[:14]
    print(f"{mode}: {best:.2f} µs of CPU per event (load {load})")


if __name__ == "__main__":
    main()
