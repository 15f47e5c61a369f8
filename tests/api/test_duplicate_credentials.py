"""Two credential headers are refused (400), never "the first one wins": on the Responses
routes (the hot create and the router's), the admin API, the WebSocket handshake and the
Anthropic route (there for ``x-api-key`` too, in Anthropic's shape). Nothing runs.
``Authorization: Bearer`` and ``x-api-key`` naming different keys are refused on every
route family (the console and /metrics included); the same key in both is accepted."""

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


def _post_message(
    server: RunningServer, sim: SimServer, headers: list[tuple[str, str]]
) -> httpx.Response:
    """A one-message Messages request with ``headers`` (beside the API version)."""
    body = {
        "model": sim.config.model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "a"}],
    }
    with httpx.Client(base_url=server.url, timeout=20) as http:
        return http.post(
            "/v1/messages", json=body, headers=[("anthropic-version", "2023-06-01"), *headers]
        )


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
    message = _anthropic_error(_post_message(server, sim, sent))
    repeated = "x-api-key" if name.startswith("x-api-key twice") else "authorization"
    assert f"2 '{repeated}' headers" in message
    assert sim.calls("/v1/messages") == 0


# `Authorization: Bearer` and `x-api-key` naming different keys: refused on every route
# family, before routing (so whichever header a route reads, it never runs).
CONFLICT = "conflicting_credentials"


def _conflicting(first: str, second: str) -> dict[str, str]:
    return {"authorization": f"Bearer {first}", "x-api-key": second}


def assert_conflict(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error == {
        "type": "invalid_request_error",
        "code": CONFLICT,
        "param": None,
        "message": error["message"],
    }
    assert "different API keys" in error["message"]


@pytest.mark.parametrize("second_is_valid", [False, True], ids=["wrong-key", "other-tenant"])
def test_every_route_family_refuses_two_different_keys(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, second_is_valid: bool
) -> None:
    other = create_tenant(server.db_url).api_key if second_is_valid else "sk-wrong"
    admin = create_admin_key(server.db_url)
    body = {"model": sim.config.model, "input": "x"}
    tenant_headers = _conflicting(tenant.api_key, other)
    with httpx.Client(base_url=server.url, timeout=20) as http:
        requests = [
            http.post("/v1/responses", json=body, headers=tenant_headers),
            http.post("/v1/responses", json={**body, "background": True}, headers=tenant_headers),
            http.get("/v1/models", headers=tenant_headers),
            http.post("/v1/conversations", json={}, headers=tenant_headers),
            http.get("/v1/conversations/conv_x/items", headers=tenant_headers),
            http.post("/v1/responses/input_tokens", json=body, headers=tenant_headers),
            http.post(
                "/admin/v1/tenants", json={"name": "dup"}, headers=_conflicting(admin, other)
            ),
            # The key the admin route reads is the right one: still refused.
            http.post("/admin/v1/tenants", json={"name": "dup"}, headers=_conflicting(admin, "x")),
            http.get("/console/login", headers=_conflicting(admin, other)),
            http.get("/metrics", headers=tenant_headers),
        ]
        for refused in requests:
            assert_conflict(refused)
        listed = http.get("/admin/v1/tenants", headers={"authorization": f"Bearer {admin}"})
    assert "dup" not in [t["name"] for t in listed.json()["data"]]
    assert sim.calls("/v1/responses") == 0


def test_the_websocket_handshake_refuses_two_different_keys(
    server: RunningServer, tenant: TenantKeys
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(
            ws_url(server),
            additional_headers=_conflicting(tenant.api_key, "sk-wrong"),
            open_timeout=10,
        )
    assert refused.value.response.status_code == 400
    error = json.loads(refused.value.response.body)["error"]
    assert error["code"] == CONFLICT and error["type"] == "invalid_request_error"


def test_the_messages_route_refuses_two_different_keys_in_anthropics_shape(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    # x-api-key (the key this route reads first) is the tenant's: refused all the same.
    answer = _post_message(server, sim, list(_conflicting("sk-wrong", tenant.api_key).items()))
    assert "different API keys" in _anthropic_error(answer)
    assert sim.calls("/v1/messages") == 0


def test_the_same_key_in_both_headers_is_accepted(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    same = _conflicting(tenant.api_key, tenant.api_key)
    with httpx.Client(base_url=server.url, timeout=20) as http:
        created = http.post(
            "/v1/responses", json={"model": sim.config.model, "input": "x"}, headers=same
        )
        assert created.status_code == 200, created.text
    message = _post_message(server, sim, list(same.items()))
    assert message.status_code == 200, message.text
    with connect(ws_url(server), additional_headers=same, open_timeout=10):
        pass
