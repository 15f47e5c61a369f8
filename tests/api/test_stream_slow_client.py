"""A streaming client that stops reading without leaving: the turn writes its events to
the client directly while the client keeps up (``http/protocol.py``'s ``DirectBody``,
``turns/runner/channel.py``), hands them to the response's own task once a write would
wait, and never waits for the client itself: it finishes and commits while the client
reads nothing, and the client, reading again, gets every event once, in order."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentic_api.http.protocol import CoalescingHttpToolsProtocol, DirectBody
from tests.conftest import running_server
from tests.support.sql import scalar
from tests.support.tenants import create_tenant
from tests.upstream_sim import Reply, SimServer

# ~1.5 MB of events: far more than the small socket buffers below and the transport's
# high-water mark (64 KiB) hold together.
WORDS = 8_000
SOCKET_BUFFER = 4096


def dechunk(body: bytes) -> bytes:
    """The payload of a chunked HTTP/1.1 body; fails unless it ends with the last chunk."""
    payload = bytearray()
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", "the body does not end with its last chunk"
            return bytes(payload)
        payload += body[:size]
        assert body[size : size + 2] == b"\r\n"
        body = body[size + 2 :]


def sse_events(payload: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in payload.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.slow  # a long answer, and a client that waits before reading it: seconds
def test_a_client_that_stops_reading_gets_every_event_once_and_the_turn_commits_meanwhile(
    db_url: str, sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: Counter[bool] = Counter()
    direct_write = DirectBody.write

    def counting_write(self: DirectBody, body: bytes) -> bool:
        done = direct_write(self, body)
        written[done] += 1
        return done

    monkeypatch.setattr(DirectBody, "write", counting_write)
    connection_made = CoalescingHttpToolsProtocol.connection_made

    def with_a_small_send_buffer(
        self: CoalescingHttpToolsProtocol, transport: asyncio.BaseTransport
    ) -> None:
        # Left to itself the kernel grows a loopback send buffer to megabytes.
        transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER
        )
        connection_made(self, transport)

    monkeypatch.setattr(CoalescingHttpToolsProtocol, "connection_made", with_a_small_send_buffer)
    with running_server(db_url, sim, tmp_path) as server:
        tenant = create_tenant(db_url)
        # The answer waits until the client has read the response's head: its first events
        # are written while the client keeps up, whatever the machine's load (unheld, a
        # busy machine can coalesce the whole answer into the first write).
        started = threading.Event()
        sim.push(Reply("word " * WORDS, hold=started))
        request = orjson.dumps({"model": sim.config.model, "input": "long", "stream": True})
        with socket.socket() as client:
            # A small receive window: the server's writes back up soon after we stop.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            client.connect(("127.0.0.1", httpx.URL(server.url).port or 80))
            client.sendall(
                b"POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                b"content-type: application/json\r\nconnection: close\r\n"
                + f"authorization: Bearer {tenant.api_key}\r\n".encode()
                + f"content-length: {len(request)}\r\n\r\n".encode()
                + request
            )
            received = client.recv(2048)
            assert received.startswith(b"HTTP/1.1 200"), received[:200]
            started.set()
            # Reading nothing more, wait for the turn to be stored as completed.
            deadline = time.monotonic() + 30
            while scalar(db_url, "SELECT count(*) FROM responses WHERE status = 'completed'") == 0:
                assert time.monotonic() < deadline, "the turn waited for its client"
                time.sleep(0.05)
            client.settimeout(30)
            while chunk := client.recv(65536):
                received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        events = sse_events(dechunk(body))
        # Every event once, in order, ending with the terminal one.
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        assert "".join(deltas) == "word " * WORDS
        assert events[-1]["type"] == "response.completed"
        # The same events as stored.
        response_id = events[0]["response"]["id"]
        replay = httpx.get(
            f"{server.url}/v1/responses/{response_id}",
            params={"stream": "true"},
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=30,
        )
        assert sse_events(replay.content) == events
    # The turn wrote to the client itself while it kept up, and handed the rest to the
    # response's task once it did not.
    assert written[True] > 0
    assert written[False] > 0
