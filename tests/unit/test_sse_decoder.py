"""The upstream's SSE decoding: lines and events however the bytes are cut into chunks."""

from __future__ import annotations

from agentic_api.upstream.sse import SseDecoder, SseEvent


def decoded(*chunks: bytes) -> list[tuple[str | None, str]]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    events += decoder.end()
    return [(e.event, e.data.decode()) for e in events]


STREAM = (
    b'event: response.created\r\ndata: {"a":1}\r\n\r\n'
    b": keep-alive\n\n"
    b"id: 7\nevent: multi\ndata: one\ndata:two\n\n"
    + "data: données — 数据\n\n".encode()
    # The shapes read a whole event at once, and one that looks like them but is not.
    + b'event: response.output_text.delta\ndata: {"b":2}\n\n'
    + b"event: two\ndata: a\ndata: b\n\n"
    + b"event: e\ndata\n\n"
    + b"data: x\ndata: y\n\n"
)
EXPECTED = [
    ("response.created", '{"a":1}'),
    ("multi", "one\ntwo"),
    (None, "données — 数据"),
    ("response.output_text.delta", '{"b":2}'),
    ("two", "a\nb"),
    ("e", ""),
    (None, "x\ny"),
]


def test_a_stream_decodes_the_same_however_it_is_cut() -> None:
    assert decoded(STREAM) == EXPECTED
    # Every cut point, multi-byte characters and CRLF pairs split included.
    for cut in range(len(STREAM) + 1):
        assert decoded(STREAM[:cut], STREAM[cut:]) == EXPECTED, cut
    assert decoded(*(STREAM[i : i + 1] for i in range(len(STREAM)))) == EXPECTED


def test_events_are_returned_by_the_chunk_that_completes_them() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: 1\n") == []
    assert [e.data for e in decoder.feed(b"\ndata: 2\n\ndata: 3")] == [b"1", b"2"]
    assert [e.data for e in decoder.end()] == [b"3"]
    assert decoder.end() == []


def test_a_last_line_without_its_terminator_still_counts() -> None:
    assert decoded(b"event: e\ndata: tail") == [("e", "tail")]
    assert decoded(b"data: a\n\n: only a comment") == [(None, "a")]


def test_a_line_far_longer_than_any_buffer_is_one_line() -> None:
    long_line = b"data: " + b"x" * 3_000_000
    pieces = [long_line[i : i + 65536] for i in range(0, len(long_line), 65536)]
    assert decoded(*pieces, b"\n\n") == [(None, "x" * 3_000_000)]


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert decoded(b"\n\n\r\n: c\n\nevent: lonely\n\n") == []


def test_data_stays_the_bytes_that_came() -> None:
    # Not decoded (a JSON parser takes the UTF-8 bytes), so bytes that are not UTF-8 stay
    # as they were for the parser to refuse, on both paths (a whole event, line by line).
    invalid = b"\xff\xfe"
    for stream in (b"data: " + invalid + b"\n\n", b"data: " + invalid + b"\r\n\r\n"):
        decoder = SseDecoder()
        assert [e.data for e in decoder.feed(stream)] == [invalid]
