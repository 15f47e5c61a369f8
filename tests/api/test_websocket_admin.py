"""An open WebSocket obeys the admin: every ``response.create`` re-checks the key, the
tenant and its salt through the same key memo as HTTP, and a connection-local history
is not continued once what it holds of storage was deleted or purged. Over a real
WebSocket, on both databases; the cross-process cases run two servers on one database,
as two workers or replicas would."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.connection import Connection

from agentic_api.serving.tenants import KEY_MEMO_SECONDS
from lineage import mint_cache_salt
from tests.conftest import TEST_SECRET, RunningServer, app_server
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.support.websocket import open_socket, send_create, until_terminal
from tests.upstream_sim import SimServer

CLOSE_CREDENTIALS_REFUSED = 1008


@pytest.fixture
def admin(server: RunningServer) -> Iterator[httpx.Client]:
    with admin_client(server) as http:
        yield http


def admin_client(server: RunningServer) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/admin/v1",
        headers={"authorization": f"Bearer {create_admin_key(server.db_url)}"},
        timeout=20,
    )


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def create(socket: Connection, model: str, **fields: Any) -> list[dict[str, Any]]:
    socket.send(json.dumps({"type": "response.create", "model": model, **fields}))
    return until_terminal(socket)


def completed(socket: Connection, model: str, **fields: Any) -> dict[str, Any]:
    events = create(socket, model, **fields)
    assert events[-1]["type"] == "response.completed", events[-1]
    response: dict[str, Any] = events[-1]["response"]
    return response


def refused(socket: Connection, model: str, **fields: Any) -> dict[str, Any]:
    """The one frame a refused request gets."""
    events = create(socket, model, **fields)
    assert [e["type"] for e in events] == ["error"], events
    return events[0]


def revoke_only_key(admin: httpx.Client, tenant: TenantKeys) -> None:
    keys = ok(admin.get(f"/tenants/{tenant.id}/api_keys"))["data"]
    assert len(keys) == 1
    ok(admin.delete(f"/tenants/{tenant.id}/api_keys/{keys[0]['id']}"))


def assert_closed_for_credentials(socket: Connection, model: str) -> None:
    assert_credentials_refused(socket, refused(socket, model, input="after the admin acted"))


def assert_credentials_refused(socket: Connection, frame: dict[str, Any]) -> None:
    """``frame`` refuses the connection's key, and the server closes the connection."""
    assert frame["type"] == "error" and frame["status"] == 401, frame
    assert frame["error"]["type"] == "invalid_request_error"
    assert frame["error"]["code"] == "invalid_api_key"
    assert "no longer accepted" in frame["error"]["message"]
    with pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == CLOSE_CREDENTIALS_REFUSED


def test_a_revoked_key_ends_the_open_socket_at_its_next_request(
    server: RunningServer, admin: httpx.Client, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    with open_socket(server, tenant) as socket:
        completed(socket, model, input="before")
        revoke_only_key(admin, tenant)
        assert_closed_for_credentials(socket, model)
    assert sim.calls("/v1/responses") == 1


def test_a_disabled_tenant_ends_the_open_socket_and_queued_requests_never_run(
    server: RunningServer, admin: httpx.Client, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    with open_socket(server, tenant) as socket:
        completed(socket, model, input="before")
        ok(admin.post(f"/tenants/{tenant.id}/disable"))
        # Two lanes' requests at once: each is checked, none reaches the model.
        for lane in ("a", "b"):
            send_create(socket, model=model, input="x", stream_id=lane)
        frame = json.loads(socket.recv(timeout=10))
        assert frame["type"] == "error" and frame["status"] == 401
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                late = json.loads(socket.recv(timeout=10))
                assert late["type"] == "error", late
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == CLOSE_CREDENTIALS_REFUSED
    assert sim.calls("/v1/responses") == 1


def test_a_rotated_salt_is_the_next_turns_salt_on_the_open_socket(
    server: RunningServer, admin: httpx.Client, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    with open_socket(server, tenant) as socket:
        first = completed(socket, model, input="Remember this. " * 8, store=False)
        assert sim.last("/v1/responses").json["cache_salt"] == mint_cache_salt(
            TEST_SECRET.encode(), tenant.id, 1
        )
        assert ok(admin.post(f"/tenants/{tenant.id}/rotate_salt"))["salt_epoch"] == 2
        # A connection-local continuation as well: its history is the same, its salt new.
        completed(socket, model, input="And?", store=False, previous_response_id=first["id"])
    assert sim.last("/v1/responses").json["cache_salt"] == mint_cache_salt(
        TEST_SECRET.encode(), tenant.id, 2
    )


def test_after_a_purge_the_socket_continues_nothing_it_held(
    server: RunningServer, admin: httpx.Client, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    with open_socket(server, tenant) as socket:
        stored = completed(socket, model, input="secret stored context")
        # A store: false turn on top: its history, kept by the connection, holds the
        # stored turn's text.
        unstored = completed(
            socket, model, input="more", store=False, previous_response_id=stored["id"]
        )
        ok(admin.delete(f"/tenants/{tenant.id}/data"))
        sent_before = sim.calls("/v1/responses")
        for parent in (stored["id"], unstored["id"]):
            frame = refused(socket, model, input="go on", store=False, previous_response_id=parent)
            assert frame["status"] == 404
            assert frame["error"]["code"] == "previous_response_not_found"
            assert frame["error"]["param"] == "previous_response_id"
        assert sim.calls("/v1/responses") == sent_before
        # The connection itself is fine: a new chain runs.
        completed(socket, model, input="a new start")
    assert "secret stored context" not in json.dumps(sim.last("/v1/responses").json)


def test_a_deleted_response_is_not_continued_from_the_connection(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    with open_socket(server, tenant) as socket:
        stored = completed(socket, model, input="to be deleted")
        unstored = completed(
            socket, model, input="more", store=False, previous_response_id=stored["id"]
        )
        server.client(tenant).responses.delete(stored["id"])
        for parent in (stored["id"], unstored["id"]):
            frame = refused(socket, model, input="x", store=False, previous_response_id=parent)
            assert frame["error"]["code"] == "previous_response_not_found"


def test_a_store_false_turn_in_a_deleted_conversation_is_not_continued(
    server: RunningServer, admin: httpx.Client, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    conversation = server.client(tenant).conversations.create(
        items=[{"type": "message", "role": "user", "content": "conversation context"}]
    )
    with open_socket(server, tenant) as socket:
        # Nothing of it is stored as a response: the history is the conversation's items.
        answer = completed(socket, model, input="hi", store=False, conversation=conversation.id)
        chained = completed(
            socket, model, input="again", store=False, previous_response_id=answer["id"]
        )
        ok(admin.delete(f"/tenants/{tenant.id}/conversations/{conversation.id}"))
        frame = refused(socket, model, input="x", store=False, previous_response_id=chained["id"])
        assert frame["error"]["code"] == "previous_response_not_found"


def test_a_store_false_chain_that_stored_nothing_still_continues(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    """The check costs a chain that lives only in the connection nothing: no row to read."""
    model = sim.config.model
    with open_socket(server, tenant) as socket:
        first = completed(socket, model, input="one", store=False)
        second = completed(
            socket, model, input="two", store=False, previous_response_id=first["id"]
        )
        completed(socket, model, input="three", store=False, previous_response_id=second["id"])
    assert len(sim.last("/v1/responses").json["input"]) == 5


@pytest.mark.slow  # waits out the key memo of the other server: KEY_MEMO_SECONDS
def test_admin_actions_through_another_server_reach_the_socket_within_the_bound(
    backend: str, db_url: str, sim: SimServer, tmp_path: Path
) -> None:
    """The admin acts through one server (a worker or replica); the socket is open on
    another, whose key memo still holds the tenant. Storage checks bite at once; the
    key memo's within KEY_MEMO_SECONDS."""
    model = sim.config.model
    tenant = create_tenant(db_url)
    with (
        app_server(backend, db_url, sim.url, tmp_path / "a") as acting,
        app_server(backend, db_url, sim.url, tmp_path / "b") as serving,
        admin_client(acting) as admin,
        open_socket(serving, tenant) as socket,
    ):
        stored = completed(socket, model, input="stored on the other server")
        ok(admin.delete(f"/tenants/{tenant.id}/data"))
        frame = refused(socket, model, input="x", previous_response_id=stored["id"])
        assert frame["error"]["code"] == "previous_response_not_found"

        ok(admin.post(f"/tenants/{tenant.id}/rotate_salt"))
        rotated_at = time.monotonic()
        time.sleep(max(0.0, rotated_at + KEY_MEMO_SECONDS + 0.2 - time.monotonic()))
        completed(socket, model, input="after the bound", store=False)
        assert sim.last("/v1/responses").json["cache_salt"] == mint_cache_salt(
            TEST_SECRET.encode(), tenant.id, 2
        )

        revoke_only_key(admin, tenant)
        revoked_at = time.monotonic()
        time.sleep(max(0.0, revoked_at + KEY_MEMO_SECONDS + 0.2 - time.monotonic()))
        assert_closed_for_credentials(socket, model)
