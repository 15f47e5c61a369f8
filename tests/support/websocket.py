"""A raw WebSocket client of the Responses WebSocket mode, for tests that need frames the
SDK's ``responses.connect()`` does not send or show."""

from __future__ import annotations

import json
from typing import Any

from websockets.sync.client import ClientConnection, connect
from websockets.sync.connection import Connection

from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def ws_url(server: RunningServer) -> str:
    return server.url.replace("http://", "ws://") + "/v1/responses"


def open_socket(
    server: RunningServer, tenant: TenantKeys, headers: dict[str, str] | None = None
) -> ClientConnection:
    return connect(
        ws_url(server),
        additional_headers={"authorization": f"Bearer {tenant.api_key}", **(headers or {})},
        open_timeout=10,
    )


def until_terminal(socket: Connection) -> list[dict[str, Any]]:
    """Frames up to a terminal event, or a connection-level error frame. (A connection
    used as a context manager is typed as the base ``Connection``.)"""
    events: list[dict[str, Any]] = []
    while True:
        event = json.loads(socket.recv(timeout=20))
        events.append(event)
        if event["type"] in TERMINAL or (
            event["type"] == "error" and "sequence_number" not in event
        ):
            return events


def send_create(socket: Connection, **fields: Any) -> None:
    """Sends one ``response.create`` frame with these fields."""
    socket.send(json.dumps({"type": "response.create", **fields}))
