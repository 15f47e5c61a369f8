"""Server-sent events parsing (the upstream's stream) and framing (ours)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    event: str | None
    data: str


async def split_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """Lines (without their ``\n`` / ``\r\n``) of a byte stream, whatever their length.

    Splitting bytes on ``\n`` before decoding is safe: UTF-8 never uses that byte inside a
    multi-byte character. A final line without a terminator is yielded too.
    """
    parts: list[bytes] = []
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            parts.append(chunk[start:end])
            yield _decode_line(b"".join(parts))
            parts.clear()
            start = end + 1
        if start < len(chunk):
            # Kept in pieces: a long line arriving in many chunks is joined once.
            parts.append(chunk[start:])
    if parts:
        yield _decode_line(b"".join(parts))


def _decode_line(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", "replace")


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
