"""The Responses WebSocket (Codex's transport): the official SDK's responses.connect()
and a raw websocket client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from openai import NotFoundError, OpenAI
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from tests.conftest import RunningServer, app_server
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.websocket import TERMINAL, open_socket, send_create, until_terminal, ws_url
from tests.upstream_sim import Reply, SimServer


def test_sdk_sequential_responses_and_continuation(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("first over the socket"), Reply("second over the socket"))
    with client.responses.connect() as connection:
        connection.response.create(model=sim.config.model, input="one")
        first = _final(connection)
        connection.response.create(
            model=sim.config.model, input="two", previous_response_id=first.id
        )
        second = _final(connection)
    assert first.output_text == "first over the socket"
    assert second.output_text == "second over the socket"
    assert second.previous_response_id == first.id
    # Stored like any HTTP response, and the chain replayed the first turn upstream.
    assert client.responses.retrieve(second.id).output_text == "second over the socket"
    upstream_input = sim.last("/v1/responses").json["input"]
    assert len(upstream_input) == 3


def _final(connection: Any) -> Any:
    for event in connection:
        if event.type in TERMINAL:
            return event.response
        assert event.type != "error", event
    raise AssertionError("connection closed early")


def test_store_false_chain_within_one_connection_and_not_after_reconnect(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with open_socket(server, tenant) as socket:
        send_create(socket, model=sim.config.model, input="ephemeral", store=False)
        first = until_terminal(socket)[-1]["response"]
        send_create(
            socket,
            model=sim.config.model,
            input="more",
            store=False,
            previous_response_id=first["id"],
        )
        second = until_terminal(socket)[-1]
        assert second["type"] == "response.completed"
        assert len(sim.last("/v1/responses").json["input"]) == 3
    with open_socket(server, tenant) as socket:
        send_create(socket, model=sim.config.model, input="x", previous_response_id=first["id"])
        error = json.loads(socket.recv(timeout=20))
    assert error["type"] == "error" and error["status"] == 404
    assert error["error"]["code"] == "previous_response_not_found"
    assert error["error"]["param"] == "previous_response_id"


def test_generate_false_then_continue(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with open_socket(server, tenant) as socket:
        send_create(socket, model=sim.config.model, input="context only", generate=False)
        prepared = until_terminal(socket)
        assert [e["type"] for e in prepared] == ["response.created", "response.completed"]
        assert sim.calls("/v1/responses") == 0
        prepared_id = prepared[-1]["response"]["id"]
        send_create(
            socket, model=sim.config.model, input="now answer", previous_response_id=prepared_id
        )
        answer = until_terminal(socket)[-1]
    assert answer["type"] == "response.completed"
    sent = sim.last("/v1/responses").json["input"]
    assert [item["content"][0]["text"] for item in sent] == ["context only", "now answer"]


def test_lanes_echo_stream_id_and_keep_order(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with open_socket(server, tenant) as socket:
        for lane, text in (("a", "a1"), ("b", "b1"), ("a", "a2")):
            send_create(socket, model=sim.config.model, input=text, stream_id=lane)
        finished: dict[str, list[str]] = {"a": [], "b": []}
        while sum(len(v) for v in finished.values()) < 3:
            event = json.loads(socket.recv(timeout=20))
            assert event["stream_id"] in ("a", "b")
            if event["type"] == "response.completed":
                finished[event["stream_id"]].append(
                    event["response"]["output"][0]["content"][0]["text"]
                )
    assert finished["a"] == ["echo: a1", "echo: a2"]
    assert finished["b"] == ["echo: b1"]


def test_malformed_and_unknown_frames(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with open_socket(server, tenant) as socket:
        socket.send("not json")
        assert json.loads(socket.recv(timeout=10))["error"]["code"] == "invalid_frame"
        socket.send(json.dumps([1, 2]))
        assert json.loads(socket.recv(timeout=10))["error"]["code"] == "invalid_frame"
        socket.send(json.dumps({"type": "response.processed", "response_id": "resp_x"}))
        send_create(socket, model=sim.config.model, input="x", background=True)
        error = json.loads(socket.recv(timeout=10))
        assert error["status"] == 400 and error["error"]["param"] == "background"
        send_create(socket, input="no model")
        error = json.loads(socket.recv(timeout=10))
        assert error["error"]["param"] == "model"
        # The connection is still usable after all of that.
        send_create(socket, model=sim.config.model, input="fine")
        assert until_terminal(socket)[-1]["type"] == "response.completed"


def test_unauthenticated_upgrade_is_refused(server: RunningServer) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(
            ws_url(server), additional_headers={"authorization": "Bearer wrong"}, open_timeout=10
        )
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"


def test_other_tenant_cannot_continue_over_socket(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    mine = client.responses.create(model=sim.config.model, input="mine")
    with open_socket(server, create_tenant(server.db_url)) as socket:
        send_create(socket, model=sim.config.model, input="x", previous_response_id=mine.id)
        assert json.loads(socket.recv(timeout=10))["error"]["code"] == (
            "previous_response_not_found"
        )


@pytest.mark.slow  # waits out a disconnect, a drain or a full lane: seconds
def test_lane_queue_limit(server: RunningServer, tenant: TenantKeys, sim: SimServer) -> None:
    from agentic_api.http.routes.websocket import MAX_QUEUED_PER_LANE

    sim.push(*[Reply("slow", delay=0.3)] * (MAX_QUEUED_PER_LANE + 3))
    with open_socket(server, tenant) as socket:
        for _ in range(MAX_QUEUED_PER_LANE + 3):
            send_create(socket, model=sim.config.model, input="q")
        codes: list[str] = []
        completed = 0
        while completed + len(codes) < MAX_QUEUED_PER_LANE + 3:
            event = json.loads(socket.recv(timeout=30))
            if event["type"] == "error":
                codes.append(event["error"]["code"])
            elif event["type"] == "response.completed":
                completed += 1
    assert set(codes) == {"lane_queue_full"}
    assert completed >= MAX_QUEUED_PER_LANE


@contextmanager
def own_server(
    backend: str,
    db_url: str,
    sim: SimServer,
    tmp_path_factory: pytest.TempPathFactory,
    **settings: object,
) -> Iterator[Connection]:
    """A new tenant's socket to a server of the test's own, started with these settings."""
    tenant = create_tenant(db_url)
    data = tmp_path_factory.mktemp("ws")
    with (
        app_server(backend, db_url, sim.url, data, **settings) as live,
        open_socket(live, tenant) as socket,
    ):
        yield socket


def test_connection_lifetime_limit(
    backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from websockets.exceptions import ConnectionClosed

    own = own_server(backend, db_url, sim, tmp_path_factory, ws_max_connection_seconds=1.0)
    with own as socket:
        frame = json.loads(socket.recv(timeout=10))
        assert frame["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


@pytest.mark.slow  # waits out a disconnect, a drain or a full lane: seconds
def test_disconnect_mid_turn_still_stores_the_turn(
    server: RunningServer, client: OpenAI, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(Reply("slow words " * 10, event_delay=0.05))
    with open_socket(server, tenant) as socket:
        send_create(socket, model=sim.config.model, input="x")
        created = json.loads(socket.recv(timeout=10))
    response_id = created["response"]["id"]
    assert sim.wait_done(1, "/v1/responses", timeout=15)
    for _ in range(100):
        try:
            stored = client.responses.retrieve(response_id)
            break
        except NotFoundError:
            time.sleep(0.05)
    assert stored.status == "completed"
    assert stored.output_text == "slow words " * 10


def test_oversized_frame_gets_an_error_and_the_connection_survives(
    backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with own_server(backend, db_url, sim, tmp_path_factory, max_body_bytes=2000) as socket:
        big = {"type": "response.create", "model": sim.config.model, "input": "x" * 3000}
        socket.send(json.dumps(big))
        error = json.loads(socket.recv(timeout=10))
        assert error["status"] == 413 and error["error"]["code"] == "request_too_large"
        small = {"type": "response.create", "model": sim.config.model, "input": "small"}
        socket.send(json.dumps(small))
        assert until_terminal(socket)[-1]["type"] == "response.completed"


@pytest.mark.slow  # waits out a disconnect, a drain or a full lane: seconds
def test_shutdown_drains_a_turn_in_flight(
    backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tenant = create_tenant(db_url)
    sim.push(Reply("finishing during shutdown " * 4, event_delay=0.05))
    data = tmp_path_factory.mktemp("ws")
    with app_server(backend, db_url, sim.url, data) as live:
        socket = open_socket(live, tenant)
        send_create(socket, model=sim.config.model, input="x")
        response_id = json.loads(socket.recv(timeout=10))["response"]["id"]
    # The server has stopped; the turn it was running was finished and stored first.
    socket.close()
    with app_server(backend, db_url, sim.url, data) as again:
        stored = again.client(tenant).responses.retrieve(response_id)
    assert stored.status == "completed"
    assert stored.output_text == "finishing during shutdown " * 4
