"""Server-sent events parsing (the upstream's stream) and framing (ours)."""

from __future__ import annotations

from dataclasses import dataclass


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# which made building the event cost more than decoding it (one per relayed event).
@dataclass(slots=True)
class SseEvent:
    """``data``: the event's data lines joined by ``\n``, as the bytes that came: JSON
    parsers take UTF-8 bytes as they are (and refuse bytes that are not UTF-8), so no event
    is decoded to text only to be parsed."""

    event: str | None
    data: bytes


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
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        start = 0
        find = chunk.find
        if self._partial:
            end = find(b"\n")
            if end == -1:
                self._partial.append(chunk)
                return events
            # Kept in pieces: a long line arriving in many chunks is joined once.
            self._partial.append(chunk[:end])
            line = b"".join(self._partial)
            self._partial.clear()
            self._line(line, events)
            start = end + 1
        blocks = True
        while True:
            if blocks and not self._data and self._event is None:
                # A whole event at once (its lines up to the blank line ending it), the
                # common case, where no line before it is still open.
                end = find(b"\n\n", start)
                if end == -1:
                    blocks = False
                elif b"\r" not in (block := chunk[start:end]):
                    start = end + 2
                    self._block(block, events)
                    continue
            end = find(b"\n", start)
            if end == -1:
                break
            self._line(chunk[start:end], events)
            start = end + 1
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
            events.append(SseEvent(self._event, b"\n".join(self._data)))
            self._event, self._data = None, []
        return events

    def _block(self, block: bytes, events: list[SseEvent]) -> None:
        """One event's lines (LF-ended, no CR), its blank line taken off. The two shapes
        model servers send, ``event: NAME`` + ``data: JSON`` and a lone ``data: JSON``,
        are read at once; anything else goes line by line, the same as ``_line``."""
        if block.startswith(b"event: "):
            split = block.find(b"\n", 7)
            one_data_line = block.startswith(b"data: ", split + 1) and (
                block.find(b"\n", split + 1) == -1
            )
            if split != -1 and one_data_line:
                name = block[7:split].decode("utf-8", "replace")
                events.append(SseEvent(name, block[split + 7 :]))
                return
        elif block.startswith(b"data: ") and block.find(b"\n") == -1:
            events.append(SseEvent(None, block[6:]))
            return
        for line in block.split(b"\n"):
            self._line(line, events)
        self._line(b"", events)

    def _line(self, raw: bytes, events: list[SseEvent]) -> None:
        line = raw.rstrip(b"\r")
        if not line:
            if self._data:
                events.append(SseEvent(self._event, b"\n".join(self._data)))
            self._event, self._data = None, []
            return
        if line[:1] == b":":
            return
        field, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if field == b"event":
            self._event = value.decode("utf-8", "replace")
        elif field == b"data":
            self._data.append(value)
