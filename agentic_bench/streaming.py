"""``bench streaming``: what a Responses server costs a streamed turn, next to the upstream.

N concurrent ``stream: true`` creates go to every target: directly to the upstream (the
baseline, ``store: false``, the whole input) and through one or more Responses servers
(stored, as a client of theirs would send them). Each reply is ``output_tokens`` text
tokens (the simulator is told to answer that many; ``max_output_tokens`` leaves room for
the end-of-sequence token only, so a longer reply would be cut and counted as failed).
The targets take turns round by round in a rotating order, as in ``bench overhead``, so
that whatever else the machine does falls on all of them alike.

Per stream: TTFB (response head received), TTFT (first ``response.output_text.delta``),
tail (last delta -> the body's end: the terminal event, and whatever the server sends
after it, received and the connection's body closed), total, deltas and events. Per
target: p50/p95 of each, delivered deltas/s (deltas of a round / its wall time, over all
rounds) and its ratio to the baseline's, TTFT added to the baseline's, and, for local
targets given a pid, the server's CPU per 1,000 relayed events (events = the SSE events
with a JSON body the client received; the peer's closing ``[DONE]`` is not one).

The client is aiohttp (its C parser) reading raw chunks: with 48 streams on a small
machine the client shares the CPUs with the servers, and it should take as little as it
can, the same for every target. Its own CPU per 1,000 events is reported too: on a machine
this small it is part of what each target's figures include.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from agentic_api.charts import bar_chart, stack_vertically
from agentic_bench.client import BenchError, filler_text, message
from agentic_bench.output import write_results
from agentic_bench.process_cpu import CpuMeter
from agentic_bench.stats import percentile

DELTA = "response.output_text.delta"
COMPLETED = "response.completed"
TERMINALS = frozenset({COMPLETED, "response.incomplete", "response.failed"})


@dataclass(frozen=True)
class StreamingConfig:
    model: str
    streams: int = 48
    rounds: int = 3
    output_tokens: int = 200
    input_words: int = 40
    # Unmeasured rounds per target first: connections opened, code paths warm.
    warmup_rounds: int = 1
    temperature: float = 0.0
    cache_salt: str = "bench-streaming"
    timeout: float = 300.0


@dataclass
class StreamRecord:
    """One stream as the client saw it. Times in ms from sending the request; None where
    the stream never got there."""

    target: str
    round: int
    stream: int
    ok: bool
    error: str | None = None
    http_status: int | None = None
    ttfb_ms: float | None = None
    # The first event (response.created): how soon a client knows its response started.
    first_event_ms: float | None = None
    ttft_ms: float | None = None
    last_delta_ms: float | None = None
    terminal_ms: float | None = None
    total_ms: float | None = None
    tail_ms: float | None = None
    deltas: int = 0
    events: int = 0
    terminal: str | None = None
    output_tokens: int | None = None


# Below every server's keep-alive timeout (see ``StreamTarget.session``).
KEEPALIVE_S = 2.0


class SseSplitter:
    """Cuts an SSE byte stream into the data of its events (as bytes, lines joined)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *blocks, self._buffer = buffer.split(b"\n\n")
        for block in blocks:
            data = [
                line[5:].removeprefix(b" ")
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            ]
            if data:
                yield b"\n".join(data)


@dataclass
class StreamTarget:
    """A Responses endpoint: ``stateful`` for a server (ours, a peer), else the upstream
    itself, sent ``store: false`` and a cache salt as our server would send it."""

    name: str
    base_url: str
    stateful: bool
    api_key: str | None = None
    timeout: float = 300.0
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)

    @property
    def root(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            headers = {"content-type": "application/json"}
            if self.api_key:
                headers["authorization"] = f"Bearer {self.api_key}"
            self._session = aiohttp.ClientSession(
                headers=headers,
                # Idle connections are dropped before a server's keep-alive would close
                # them (uvicorn: 5 s): a round that reused one the server was closing at
                # that moment failed with ServerDisconnectedError before the response
                # head (seen at 32 streams with four targets taking turns).
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def first_model(self) -> str:
        try:
            async with self.session.get(f"{self.root}/v1/models") as response:
                if response.status != 200:
                    raise BenchError(f"{self.name}: GET /v1/models answered {response.status}")
                data = (await response.json()).get("data") or []
        except aiohttp.ClientError as exc:
            raise BenchError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if not data:
            raise BenchError(f"{self.name}: /v1/models lists no model")
        return str(data[0]["id"])

    async def stream(self, body: bytes, record: StreamRecord) -> StreamRecord:
        """Sends one create and reads its stream to the end, filling ``record``. Never
        raises for what the server did: a failure is recorded, and counted."""
        started = time.perf_counter()

        def ms() -> float:
            return (time.perf_counter() - started) * 1000

        try:
            async with self.session.post(f"{self.root}/v1/responses", data=body) as response:
                record.ttfb_ms = ms()
                record.http_status = response.status
                if response.status != 200:
                    text = (await response.read()).decode(errors="replace")
                    record.error = f"HTTP {response.status}: {text[:200]}"
                    return record
                splitter = SseSplitter()
                async for chunk in response.content.iter_any():
                    now = ms()
                    for data in splitter.feed(chunk):
                        _take(record, data, now)
                record.total_ms = ms()
        except (aiohttp.ClientError, TimeoutError) as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            return record
        if record.last_delta_ms is not None:
            record.tail_ms = record.total_ms - record.last_delta_ms
        if record.error is None and record.terminal != COMPLETED:
            record.error = f"the stream ended with {record.terminal or 'no terminal event'}"
        record.ok = record.error is None
        return record


def _take(record: StreamRecord, data: bytes, now: float) -> None:
    """One event's data. Loose checks: JSON objects with a type, a completed terminal
    event last, no error event."""
    if data == b"[DONE]":
        return  # the peer's closing sentinel, sent after the terminal event
    try:
        event = orjson.loads(data)
        kind = event["type"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        record.error = record.error or f"an event that is not a typed JSON object: {data[:80]!r}"
        return
    record.events += 1
    if record.first_event_ms is None:
        record.first_event_ms = now
    if record.terminal is not None:
        record.error = record.error or f"{kind} after the terminal event"
    if kind == DELTA:
        record.deltas += 1
        if record.ttft_ms is None:
            record.ttft_ms = now
        record.last_delta_ms = now
    elif kind == "error":
        record.error = record.error or f"error event: {data[:200]!r}"
    elif kind in TERMINALS:
        record.terminal = kind
        record.terminal_ms = now
        usage = (event.get("response") or {}).get("usage") or {}
        record.output_tokens = usage.get("output_tokens")


def request_body(config: StreamingConfig, target: StreamTarget, text: str) -> bytes:
    body: dict[str, Any] = {
        "model": config.model,
        "input": [message("user", text)],
        "stream": True,
        # Room for the reply's tokens and the end-of-sequence token, no more.
        "max_output_tokens": config.output_tokens + 1,
        "temperature": config.temperature,
    }
    if not target.stateful:
        body["store"] = False
        body["cache_salt"] = config.cache_salt
    return orjson.dumps(body)


@dataclass
class Round:
    target: str
    round: int
    position: int  # the target's place in this round's order
    wall_s: float
    records: list[StreamRecord]
    cpu_s: float | None = None
    # The bench's own CPU in the round: it shares the machine with the servers, and a
    # target whose events arrive in fewer, larger chunks costs it less.
    client_cpu_s: float = 0.0

    @property
    def deltas(self) -> int:
        return sum(r.deltas for r in self.records)

    @property
    def events(self) -> int:
        return sum(r.events for r in self.records)

    def row(self) -> dict[str, Any]:
        ok = [r for r in self.records if r.ok]
        return {
            "target": self.target,
            "round": self.round,
            "position": self.position,
            "streams": len(self.records),
            "failed": len(self.records) - len(ok),
            "wall_s": self.wall_s,
            "deltas": self.deltas,
            "events": self.events,
            "deltas_per_s": self.deltas / self.wall_s if self.wall_s else float("nan"),
            "ttft_p50_ms": _p([r.ttft_ms for r in ok], 50),
            "tail_p95_ms": _p([r.tail_ms for r in ok], 95),
            "cpu_s": self.cpu_s,
            "cpu_ms_per_1k_events": (
                self.cpu_s * 1000 / self.events * 1000
                if self.cpu_s is not None and self.events
                else None
            ),
            "client_cpu_s": self.client_cpu_s,
        }


def _measured(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _p(values: Sequence[float | None], q: float) -> float:
    return percentile([v for v in values if v is not None], q)


async def run_round(
    target: StreamTarget,
    config: StreamingConfig,
    seed: str,
    number: int,
    position: int = 0,
    meter: CpuMeter | None = None,
) -> Round:
    bodies = [
        request_body(config, target, filler_text(config.input_words, f"{seed}-{index}"))
        for index in range(config.streams)
    ]
    records = [StreamRecord(target.name, number, index, ok=False) for index in range(len(bodies))]
    if meter is not None:
        meter.start(target.name)
    started, client_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(target.stream(b, r) for b, r in zip(bodies, records, strict=True)))
    wall = time.perf_counter() - started
    client = time.process_time() - client_started
    cpu = meter.stop(target.name) if meter is not None else None
    return Round(target.name, number, position, wall, records, cpu, client)


async def run_streaming(
    targets: Sequence[StreamTarget],
    config: StreamingConfig,
    pids: Mapping[str, int] | None = None,
) -> list[Round]:
    """Warm-up rounds, then ``config.rounds`` measured rounds, each target in turn."""
    meter = CpuMeter(dict(pids or {}))
    unknown = set(meter.pids) - {t.name for t in targets}
    if unknown:
        raise BenchError(f"--pid for unknown targets: {sorted(unknown)}")
    nonce = uuid.uuid4().hex[:8]
    for warm in range(config.warmup_rounds):
        for target in targets:
            await run_round(target, config, f"{nonce}-warm{warm}-{target.name}", -1)
    rounds: list[Round] = []
    for number in range(config.rounds):
        rotation = number % len(targets)
        for position, target in enumerate([*targets[rotation:], *targets[:rotation]]):
            seed = f"{nonce}-r{number}-{target.name}"
            rounds.append(await run_round(target, config, seed, number, position, meter))
    return rounds


def summarize(
    rounds: Sequence[Round], config: StreamingConfig, baseline: str
) -> list[dict[str, Any]]:
    """One row per target (in the order they were given)."""
    names = list(dict.fromkeys(r.target for r in rounds))
    rows: list[dict[str, Any]] = []
    for name in names:
        mine = [r for r in rounds if r.target == name]
        records = [rec for r in mine for rec in r.records]
        ok = [rec for rec in records if rec.ok]
        wall = sum(r.wall_s for r in mine)
        deltas = sum(r.deltas for r in mine)
        events = sum(r.events for r in mine)
        cpu_values = [r.cpu_s for r in mine if r.cpu_s is not None]
        cpu = sum(cpu_values) if cpu_values else None
        row: dict[str, Any] = {
            "target": name,
            "rounds": len(mine),
            "streams": len(records),
            "failed": len(records) - len(ok),
            "wrong_delta_count": sum(1 for rec in ok if rec.deltas != config.output_tokens),
            "deltas": deltas,
            "events": events,
            "wall_s": wall,
            "deltas_per_s": deltas / wall if wall else float("nan"),
        }
        for key in ("ttfb", "first_event", "ttft", "tail", "total"):
            values = [getattr(rec, f"{key}_ms") for rec in ok]
            row[f"{key}_p50_ms"] = _p(values, 50)
            row[f"{key}_p95_ms"] = _p(values, 95)
        row["cpu_s"] = cpu
        row["cpu_ms_per_1k_events"] = (
            cpu * 1000 / events * 1000 if cpu is not None and events else None
        )
        # Cores' worth of CPU the server kept busy during its rounds.
        row["cpu_busy_cores"] = cpu / wall if cpu is not None and wall else None
        client = sum(r.client_cpu_s for r in mine)
        row["client_cpu_ms_per_1k_events"] = client * 1000 / events * 1000 if events else None
        rows.append(row)
    base = next((row for row in rows if row["target"] == baseline), None)
    for row in rows:
        row["deltas_per_s_vs_baseline"] = (
            row["deltas_per_s"] / base["deltas_per_s"] if base and base["deltas_per_s"] else None
        )
        for q in ("p50", "p95"):
            row[f"added_ttft_{q}_ms"] = (
                row[f"ttft_{q}_ms"] - base[f"ttft_{q}_ms"] if base is not None else None
            )
    return rows


def failures(rounds: Sequence[Round]) -> dict[str, dict[str, int]]:
    """Per target, how many streams failed for each reason."""
    out: dict[str, dict[str, int]] = {}
    for round_ in rounds:
        for record in round_.records:
            if not record.ok:
                reasons = out.setdefault(record.target, {})
                reason = record.error or "unknown"
                reasons[reason] = reasons.get(reason, 0) + 1
    return out


def chart(rounds: Sequence[Mapping[str, Any]], title: str) -> str:
    """One panel per measure: a group of bars per round, one bar per target. ``rounds`` are
    ``Round.row()`` dicts (the JSON's ``rounds``, so a kept run's chart can be redrawn)."""
    rows = list(rounds)
    names = list(dict.fromkeys(str(r["target"]) for r in rows))
    numbers = sorted({int(row["round"]) for row in rows})

    def panel(key: str, heading: str, unit: str) -> str | None:
        by_round = {(row["target"], int(row["round"])): row.get(key) for row in rows}
        # Every target, measured or not (direct has no server CPU): each keeps its colour.
        series = {name: [_measured(by_round.get((name, n))) for n in numbers] for name in names}
        if all(v is None for values in series.values() for v in values):
            return None
        return bar_chart(
            heading, [str(n + 1) for n in numbers], series, x_title="round", y_title=unit
        )

    panels = [
        panel(
            "deltas_per_s", "delivered deltas/s (deltas of the round / its wall time)", "deltas/s"
        ),
        panel("ttft_p50_ms", "TTFT p50", "ms"),
        panel("tail_p95_ms", "tail p95 (last delta -> end of stream)", "ms"),
        panel("cpu_ms_per_1k_events", "server CPU per 1,000 relayed events", "ms"),
    ]
    return stack_vertically(title, [p for p in panels if p is not None])


def write_outputs(
    out: Path,
    name: str,
    rounds: Sequence[Round],
    rows: Sequence[dict[str, Any]],
    meta: dict[str, Any],
) -> list[Path]:
    return write_results(
        out,
        name,
        rows,
        {
            **meta,
            "results": list(rows),
            "rounds": [r.row() for r in rounds],
            "failures": failures(rounds),
        },
        chart([r.row() for r in rounds], f"bench streaming: {name}"),
        more_rows={"streams": [asdict(record) for r in rounds for record in r.records]},
    )


def table(rows: Sequence[dict[str, Any]], baseline: str) -> str:
    """The summary as printed: one line per target."""

    def num(value: float | None, spec: str = ".1f") -> str:
        return "n/a" if value is None or math.isnan(value) else format(value, spec)

    header = (
        f"{'target':>8} {'ok/all':>9} {'TTFB p50/p95':>15} {'TTFT p50/p95':>15} "
        f"{'+TTFT p50':>9} {'tail p50/p95':>15} {'total p50/p95':>17} {'deltas/s':>9} "
        f"{'vs ' + baseline:>10} {'CPU ms/1k ev':>12} {'client':>7}"
    )
    lines = [header]
    for row in rows:
        lines.append(
            f"{row['target']:>8} {row['streams'] - row['failed']:>4}/{row['streams']:<4} "
            f"{num(row['ttfb_p50_ms']):>7}/{num(row['ttfb_p95_ms']):<7} "
            f"{num(row['ttft_p50_ms']):>7}/{num(row['ttft_p95_ms']):<7} "
            f"{num(row['added_ttft_p50_ms'], '+.1f'):>9} "
            f"{num(row['tail_p50_ms']):>7}/{num(row['tail_p95_ms']):<7} "
            f"{num(row['total_p50_ms']):>8}/{num(row['total_p95_ms']):<8} "
            f"{num(row['deltas_per_s'], '.0f'):>9} "
            f"{num(row['deltas_per_s_vs_baseline'], '.3f'):>10} "
            f"{num(row['cpu_ms_per_1k_events']):>12} "
            f"{num(row['client_cpu_ms_per_1k_events']):>7}"
        )
    lines.append(
        "(times in ms; percentiles over streams that completed; CPU: the server's (--pid) "
        "and the bench client's own, per 1,000 events received)"
    )
    return "\n".join(lines)
