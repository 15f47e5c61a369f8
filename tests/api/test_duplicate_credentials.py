"""Two credential headers are refused (400), never "the first one wins": on the Responses
routes (the hot create and the router's), the admin API, the WebSocket handshake and the
Anthropic route (there for ``x-api-key`` too, in Anthropic's shape). Nothing runs."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.support.websocket import ws_url
from tests.upstream_sim import SimServer


def twice(first: str, second: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {first}"), ("authorization", f"Bearer {second}")]


def assert_duplicate(response: httpx.Response, code: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code
    assert error["param"] is None
    assert "exactly one" in error["message"]


@pytest.mark.parametrize("second_is_valid", [False, True], ids=["then-wrong", "then-valid"])
def test_responses_routes_refuse_two_authorization_headers(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, second_is_valid: bool
) -> None:
    other = create_tenant(server.db_url).api_key if second_is_valid else "sk-wrong"
    headers = twice(tenant.api_key, other)
    body = {"model": sim.config.model, "input": "x"}
    with httpx.Client(base_url=server.url, timeout=20) as http:
        assert_duplicate(
            http.post("/v1/responses", json=body, headers=headers),
            "duplicate_authorization_header",
        )
        assert_duplicate(http.get("/v1/models", headers=headers), "duplicate_authorization_header")
        # One header, the same key: accepted, so the refusal above is about the count.
        single = http.post(
            "/v1/responses", json=body, headers={"authorization": f"Bearer {tenant.api_key}"}
        )
        assert single.status_code == 200, single.text
    assert sim.calls("/v1/responses") == 1


def test_admin_routes_refuse_two_authorization_headers(server: RunningServer) -> None:
    admin = create_admin_key(server.db_url)
    with httpx.Client(base_url=server.url, timeout=20) as http:
        refused = http.post("/admin/v1/tenants", json={"name": "dup"}, headers=twice(admin, admin))
        assert_duplicate(refused, "duplicate_authorization_header")
        listed = http.get("/admin/v1/tenants", headers={"authorization": f"Bearer {admin}"})
    assert listed.status_code == 200
    # The refused create changed nothing.
    assert "dup" not in [t["name"] for t in listed.json()["data"]]


def test_websocket_handshake_refuses_two_authorization_headers(
    server: RunningServer, tenant: TenantKeys
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(
            ws_url(server),
            additional_headers=twice(tenant.api_key, tenant.api_key),
            open_timeout=10,
        )
    assert refused.value.response.status_code == 400
    error = json.loads(refused.value.response.body)["error"]
    assert error["code"] == "duplicate_authorization_header"


def _anthropic_error(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "invalid_request_error"
    message: str = body["error"]["message"]
    return message


@pytest.mark.parametrize(
    ("name", "headers"),
    [
        ("x-api-key twice", [("x-api-key", "KEY"), ("x-api-key", "sk-wrong")]),
        ("authorization twice", twice("KEY", "sk-wrong")),
        # x-api-key carries the key; a repeated Authorization beside it is refused too.
        (
            "x-api-key and authorization twice",
            [("x-api-key", "KEY"), *twice("KEY", "KEY")],
        ),
    ],
)
def test_messages_route_refuses_repeated_credential_headers(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, name: str, headers: Any
) -> None:
    sent = [(k, v.replace("KEY", tenant.api_key)) for k, v in headers]
    body = {
        "model": sim.config.model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "a"}],
    }
    with httpx.Client(base_url=server.url, timeout=20) as http:
        answer = http.post(
            "/v1/messages",
            json=body,
            headers=[("anthropic-version", "2023-06-01"), *sent],
        )
    message = _anthropic_error(answer)
    repeated = "x-api-key" if name.startswith("x-api-key twice") else "authorization"
    assert f"2 '{repeated}' headers" in message
    assert sim.calls("/v1/messages") == 0
