"""Server-sent events parsing (the upstream's stream) and framing (ours)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str | None
    data: str


class SseDecoder:
    """Server-sent events from a byte stream, incrementally: each chunk fed in returns the
    events it completed. Synchronous on purpose: a chunk carrying many events (an upstream
    that got ahead of us) is one pass over its bytes, where chained async generators cost
    several suspensions per line, and every relayed event paid them.

    Lines end with ``\n`` (a ``\r`` before it is dropped); splitting bytes on ``\n``
    before decoding is safe, UTF-8 never uses that byte inside a multi-byte character. A
    line may arrive in any number of chunks, however long. Comments and ids are ignored;
    a final event or line without its terminator is delivered by ``end``.
    """

    __slots__ = ("_data", "_event", "_partial")

    def __init__(self) -> None:
        self._partial: list[bytes] = []
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        start = 0
        find = chunk.find
        while (end := find(b"\n", start)) != -1:
            if self._partial:
                # Kept in pieces: a long line arriving in many chunks is joined once.
                self._partial.append(chunk[start:end])
                line = b"".join(self._partial)
                self._partial.clear()
            else:
                line = chunk[start:end]
            start = end + 1
            self._line(line, events)
        if start < len(chunk):
            self._partial.append(chunk[start:])
        return events

    def end(self) -> list[SseEvent]:
        """What the stream's end completes: a last line and event without terminators."""
        events: list[SseEvent] = []
        if self._partial:
            line = b"".join(self._partial)
            self._partial.clear()
            self._line(line, events)
        if self._data:
            events.append(SseEvent(self._event, "\n".join(self._data)))
            self._event, self._data = None, []
        return events

    def _line(self, raw: bytes, events: list[SseEvent]) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if not line:
            if self._data:
                events.append(SseEvent(self._event, "\n".join(self._data)))
            self._event, self._data = None, []
            return
        if line[0] == ":":
            return
        field, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)


def frame_sse(event_type: str, data: bytes) -> bytes:
    return b"event: " + event_type.encode() + b"\ndata: " + data + b"\n\n"
