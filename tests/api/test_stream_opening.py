"""A streamed response opens (``response.created``, ``response.in_progress``) as soon as the
upstream has accepted the request, before its first event, whenever the sampling values
the snapshots carry are known: the request's own, or the model's defaults learned from an
earlier turn. The simulator holds its stream after the response head until the test
releases it, so "before" is an order of events, not a timing (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError, OpenAI

from tests.conftest import running_server
from tests.support.tenants import create_tenant
from tests.upstream_sim import Fail, Reply, SimServer


@pytest.fixture
def hold() -> Iterator[threading.Event]:
    gate = threading.Event()
    yield gate
    gate.set()  # never leave the simulator's stream waiting, whatever the test did


def upstream_events_sent(sim: SimServer) -> int:
    return sim.last("/v1/responses").events_sent


def read_held_stream(
    client: OpenAI, sim: SimServer, gate: threading.Event, **fields: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Creates a streamed response whose upstream holds its events; returns the events
    the client read while the upstream had sent none (created, in_progress), then the
    rest, read after the release."""
    stream = client.responses.create(model=sim.config.model, input="hi", stream=True, **fields)
    events = iter(stream)
    opening = [next(events).model_dump(), next(events).model_dump()]
    assert upstream_events_sent(sim) == 0
    gate.set()
    return opening, [event.model_dump() for event in events]


def test_a_stream_with_the_request_sampling_opens_before_the_upstream_first_event(
    client: OpenAI, sim: SimServer, hold: threading.Event
) -> None:
    sim.push(Reply("held answer", hold=hold))
    opening, rest = read_held_stream(client, sim, hold, temperature=0.3, top_p=0.6)
    assert [e["type"] for e in opening] == ["response.created", "response.in_progress"]
    assert [e["sequence_number"] for e in opening + rest] == list(range(len(opening + rest)))
    final = rest[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["id"] == opening[0]["response"]["id"]
    for event in (*opening, final):
        assert (event["response"]["temperature"], event["response"]["top_p"]) == (0.3, 0.6)
    assert "".join(e["delta"] for e in rest if e["type"] == "response.output_text.delta") == (
        "held answer"
    )
    # What was streamed is what was stored.
    assert client.responses.retrieve(final["response"]["id"]).model_dump() == final["response"]


def test_an_upstream_refusal_is_still_a_plain_http_error(client: OpenAI, sim: SimServer) -> None:
    sim.push(Fail(status=400, message="bad sampling"))
    with pytest.raises(BadRequestError):
        client.responses.create(model=sim.config.model, input="hi", stream=True, temperature=0.3)


def test_the_model_defaults_are_learned_once_and_open_later_streams_at_once(
    backend: str, fresh_db: str, tmp_path: Path
) -> None:
    # A model whose defaults are not the API's (1.0): what a snapshot shows can only come
    # from the upstream, this turn's or an earlier one's.
    with (
        SimServer(default_temperature=0.7, default_top_p=0.8) as sim,
        running_server(fresh_db, sim, tmp_path) as server,
    ):
        client = server.client(create_tenant(fresh_db), timeout=20)

        # First turn: nothing learned, so the stream opens on the upstream's snapshot.
        sim.push(Reply("first"))
        first = [
            e.model_dump()
            for e in client.responses.create(model=sim.config.model, input="hi", stream=True)
        ]
        assert first[0]["type"] == "response.created"
        assert (first[0]["response"]["temperature"], first[0]["response"]["top_p"]) == (0.7, 0.8)

        # Later turns open before the upstream sends anything, with the learned values.
        gate = threading.Event()
        try:
            sim.push(Reply("second", hold=gate))
            opening, rest = read_held_stream(client, sim, gate)
        finally:
            gate.set()
        final = rest[-1]["response"]
        assert rest[-1]["type"] == "response.completed" and final["status"] == "completed"
        for shown in (opening[0]["response"], opening[1]["response"], final):
            assert (shown["temperature"], shown["top_p"]) == (0.7, 0.8)

        # A client's own value for one field: the other is still learned.
        gate = threading.Event()
        try:
            sim.push(Reply("third", hold=gate))
            opening, rest = read_held_stream(client, sim, gate, top_p=0.5)
        finally:
            gate.set()
        for shown in (opening[0]["response"], rest[-1]["response"]):
            assert (shown["temperature"], shown["top_p"]) == (0.7, 0.5)
