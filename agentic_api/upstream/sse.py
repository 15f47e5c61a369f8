"""Server-sent events parsing (the upstream's stream) and framing (ours)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    event: str | None
    data: str


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """Yields one event per blank-line-terminated block; comments and ids are ignored."""
    event: str | None = None
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SseEvent(event, "\n".join(data))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:
        yield SseEvent(event, "\n".join(data))


def frame_sse(event_type: str, data: bytes) -> bytes:
    return b"event: " + event_type.encode() + b"\ndata: " + data + b"\n\n"
