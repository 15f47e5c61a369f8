"""What one relayed text delta costs our process, step by step, measured in process (no
sockets, no event loop turns): the figures of docs/benchmarks/streaming/design.md.

    .venv/bin/python scripts/bench/delta_costs.py [--repeat 7] [--number 100000]

A delta as vLLM writes it goes through what ``turns/runner/round.py:pump`` and the plain
turn do with it: the general path (parse, check, translate, stamp, serialize, keep for
the commit, publish, frame) and the splice (``turns/runner/delta_splice.py``), each also
whole (one delta per flush: the channel's batch written directly, framed, to a client
that takes it, as under load where each upstream chunk brings one event). Each figure is
the best of ``--repeat`` runs of ``--number`` calls (the least disturbed by other
processes: on a shared machine compare the two paths within one run).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import timeit
from collections.abc import Callable
from typing import Any

import orjson

from agentic_api.metrics import TurnMeter
from agentic_api.turns.runner.channel import Published, TurnChannel
from agentic_api.turns.runner.delta_splice import DeltaTemplate
from agentic_api.turns.runner.in_progress import _emitters
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.wire.sse import frame_sse
from agentic_api.wire.upstream_answer import EventCheck, surely_shallow

DELTA = (
    b'{"content_index":0,"delta":" word","item_id":"msg_8cae027dc1fdb64f","logprobs":[],'
    b'"output_index":0,"sequence_number":4,"type":"response.output_text.delta"}'
)
ADDED = {
    "type": "response.output_item.added",
    "sequence_number": 1,
    "output_index": 0,
    "item": {"id": "msg_8cae027dc1fdb64f", "type": "message", "content": []},
}


def shown() -> tuple[StreamRelay, EventCheck]:
    relay = StreamRelay({"id": "resp_bench", "object": "response", "output": []})
    relay.opening_events()
    check = EventCheck()
    check.problem(ADDED)
    relay.translate(ADDED)
    return relay, check


def best(call: Callable[[], Any], repeat: int, number: int) -> float:
    """Microseconds per call, the best of ``repeat`` runs."""
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def framed_writer(events: list[Published]) -> bool:
    frame = b"".join([frame_sse(kind, data) for kind, _, data in events])
    return len(frame) > 0


async def whole_path(splice: bool, repeat: int, number: int) -> float:
    """One path from upstream bytes to the client's framed write, one delta per flush."""
    relay, check = shown()
    problem_of = check.problem
    channel = TurnChannel()
    channel.write_directly(framed_writer)
    meter = TurnMeter(model="m", tenant="t", history_items=0, streaming=True)
    stored: list[tuple[int, bytes]] = []
    emit, emit_json = _emitters(meter, stored, channel)
    first = orjson.loads(DELTA)
    emit(relay.translate(dict(first)) or {})
    template = DeltaTemplate.learn(DELTA, first, relay)
    assert template is not None
    # The reader waits (as while the client keeps up): batches go to it directly.
    channel._waiter = asyncio.get_running_loop().create_future()

    def general() -> None:
        parsed = orjson.loads(DELTA)
        if problem_of(parsed, shallow=surely_shallow(DELTA)) is None:
            ours = relay.translate(parsed)
            if ours is not None:
                emit(ours)
        flush()
        if len(stored) > 200:  # a stream's worth, as a turn keeps them
            stored.clear()

    def spliced() -> None:
        ours = template.splice(DELTA, relay)
        if ours is not None:
            emit_json(*ours)
        flush()
        if len(stored) > 200:
            stored.clear()

    with channel.batched() as flush:
        return best(spliced if splice else general, repeat, number)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=100_000)
    args = parser.parse_args()
    repeat, number = args.repeat, args.number
    relay, check = shown()
    parsed = orjson.loads(DELTA)
    ours = relay.translate(copy.deepcopy(parsed)) or {}
    ours_json = orjson.dumps(ours)
    template = DeltaTemplate.learn(DELTA, parsed, relay)
    assert template is not None
    meter = TurnMeter(model="m", tenant="t", history_items=0, streaming=True)
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("parse (orjson.loads)", lambda: orjson.loads(DELTA)),
        ("depth check by length (surely_shallow)", lambda: surely_shallow(DELTA)),
        ("answer check (EventCheck.problem)", lambda: check.problem(parsed, shallow=True)),
        ("translate + stamp (copy, ids, index)", lambda: relay.translate(parsed)),
        ("metrics (TurnMeter.event)", lambda: meter.event(ours)),
        ("serialize (orjson.dumps)", lambda: orjson.dumps(ours)),
        ("frame (frame_sse)", lambda: frame_sse("response.output_text.delta", ours_json)),
        ("splice (DeltaTemplate.splice)", lambda: template.splice(DELTA, relay)),
    ]
    for label, call in steps:
        print(f"{label:42s} {best(call, repeat, number):6.3f} µs")
    for name, splice in (("general", False), ("spliced", True)):
        micros = asyncio.run(whole_path(splice, repeat, number))
        print(f"{'whole, ' + name + ' (to the framed write)':42s} {micros:6.3f} µs")


if __name__ == "__main__":
    main()
