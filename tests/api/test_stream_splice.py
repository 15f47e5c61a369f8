"""A plain streamed turn relays its text deltas through the splice
(``turns/runner/delta_splice.py``) once an item's first delta has gone the general way,
and what the client got is, byte for byte, what the stored stream replays: the SSE
frames of the live stream and of ``GET /v1/responses/{id}?stream=true`` are the same
bytes (SQLite and PostgreSQL). Deltas the splice cannot copy (a quote, a newline, a
backslash) go the general way in the same stream."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from agentic_api.turns.runner import delta_splice
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import Reply, SimServer

TEXT = (
    'Plain words, then "quoted" ones, a back\\slash, a line\nbreak, '
    "unicode é ß 中文 😀 and more plain words to stream one by one."
)


def sse_frames(response: httpx.Response) -> list[bytes]:
    """The stream's events as the raw frames they came in (``event:`` + ``data:`` lines)."""
    body = response.read()
    return [frame for frame in body.split(b"\n\n") if frame]


def data_of(frame: bytes) -> dict[str, Any]:
    event = orjson.loads(frame.split(b"\ndata: ", 1)[1])
    assert isinstance(event, dict)
    return event


def test_the_spliced_stream_is_the_stored_stream_byte_for_byte(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spliced: list[bytes] = []
    splice = delta_splice.DeltaTemplate.splice

    def counted(self: delta_splice.DeltaTemplate, data: bytes, relay: Any) -> Any:
        result = splice(self, data, relay)
        if result is not None:
            spliced.append(result[0])
        return result

    monkeypatch.setattr(delta_splice.DeltaTemplate, "splice", counted)
    sim.push(Reply(TEXT))
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    body = {"model": sim.config.model, "input": "say it", "stream": True}
    with httpx.stream(
        "POST", f"{server.url}/v1/responses", json=body, headers=headers, timeout=20
    ) as live:
        assert live.status_code == 200
        frames = sse_frames(live)
    events = [data_of(frame) for frame in frames]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(e["delta"] for e in deltas) == TEXT
    # Every delta after the first that holds no quote, backslash or control character
    # was spliced; the others went the general way, in order, in the same stream.
    copyable = [e for e in deltas[1:] if not any(c in e["delta"] for c in '"\\\n')]
    assert len(copyable) >= 10
    assert len(spliced) == len(copyable)
    assert set(spliced) <= {frame.split(b"\ndata: ", 1)[1] for frame in frames}

    response_id = events[0]["response"]["id"]
    with httpx.stream(
        "GET",
        f"{server.url}/v1/responses/{response_id}",
        params={"stream": "true"},
        headers=headers,
        timeout=20,
    ) as replay:
        assert replay.status_code == 200
        assert sse_frames(replay) == frames
