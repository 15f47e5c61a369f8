"""Server-sent events as bytes on the wire: one event's frame, the same whether the
server relays the model's events or writes its own."""

from __future__ import annotations


def frame_sse(event_type: str, data: bytes) -> bytes:
    """One SSE event: its ``event:`` line, one ``data:`` line (``data`` holds no newline:
    it is compact JSON), and the blank line that ends it."""
    return b"event: " + event_type.encode() + b"\ndata: " + data + b"\n\n"
